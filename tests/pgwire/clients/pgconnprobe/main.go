// pgconnprobe drives shoal's PostgreSQL port with pgx's low-level pgconn (current Grafana
// releases' driver): the health check, then each query given on the command line through
// the simple protocol's Exec (several statements allowed); one line per result.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgconn"
)

func main() {
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, os.Args[1])
	if err != nil {
		fail(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "-- ping").ReadAll(); err != nil {
		fail(err)
	}
	fmt.Printf("server_version\t%s\n", conn.ParameterStatus("server_version"))
	for i, query := range os.Args[1+1:] {
		results, err := conn.Exec(ctx, query).ReadAll()
		if err != nil {
			fail(err)
		}
		for j, result := range results {
			names := make([]string, len(result.FieldDescriptions))
			for k, field := range result.FieldDescriptions {
				names[k] = fmt.Sprintf("%s:%d", string(field.Name), field.DataTypeOID)
			}
			fmt.Printf("result%d.%d\t%s\t%d\t%s\n", i, j, strings.Join(names, ","), len(result.Rows), result.CommandTag)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}
