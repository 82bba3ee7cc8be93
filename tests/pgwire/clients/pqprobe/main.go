// pqprobe drives shoal's PostgreSQL port with lib/pq (older Grafana releases' driver):
// the health check, then each query given on the command line; one line per result row.
package main

import (
	"database/sql"
	"fmt"
	"os"
	"strings"

	_ "github.com/lib/pq"
)

func main() {
	db, err := sql.Open("postgres", os.Args[1])
	if err != nil {
		fail(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		fail(err)
	}
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		fail(err)
	}
	fmt.Printf("health\t%d\n", one)
	for i, query := range os.Args[2:] {
		rows, err := db.Query(query)
		if err != nil {
			fail(err)
		}
		columns, _ := rows.Columns()
		types, _ := rows.ColumnTypes()
		names := make([]string, len(types))
		for j, t := range types {
			names[j] = t.DatabaseTypeName()
		}
		fmt.Printf("columns%d\t%s\t%s\n", i, strings.Join(columns, ","), strings.Join(names, ","))
		values := make([]interface{}, len(columns))
		pointers := make([]interface{}, len(columns))
		for j := range values {
			pointers[j] = &values[j]
		}
		count := 0
		for rows.Next() {
			if err := rows.Scan(pointers...); err != nil {
				fail(err)
			}
			count++
		}
		if err := rows.Err(); err != nil {
			fail(err)
		}
		rows.Close()
		fmt.Printf("rows%d\t%d\n", i, count)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}
