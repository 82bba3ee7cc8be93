"""LogQL's grammar, for lark (LALR, contextual lexer).

Written from Loki's documentation of the language (log queries: a stream selector and
a pipeline of line filters, parsers, label filters and formatters; metric queries:
range aggregations, vector aggregations and binary operators, Prometheus' precedence).
Constructs the grammar reads but shoal does not evaluate are refused by the planner with
a 400 naming them, never answered wrongly.
"""

from __future__ import annotations

GRAMMAR = r"""
?start: expr | log_query

?expr: or_expr
?or_expr: and_expr | or_expr OR modifier and_expr -> binary
?and_expr: cmp_expr | and_expr (AND | UNLESS) modifier cmp_expr -> binary
?cmp_expr: add_expr | cmp_expr CMP modifier add_expr -> binary
?add_expr: mul_expr | add_expr ADD modifier mul_expr -> binary
?mul_expr: pow_expr | mul_expr MUL modifier pow_expr -> binary
?pow_expr: unary | unary POW modifier pow_expr -> binary
?unary: primary | ADD unary -> negate

?primary: "(" expr ")"
        | number
        | range_call
        | vector_call
        | simple_call

number: NUMBER

modifier: [BOOL] [matching]
matching: (ON | IGNORING) "(" [names] ")" [group_side]
group_side: (GROUP_LEFT | GROUP_RIGHT) ["(" [names] ")"]
names: NAME ("," NAME)* [","]

log_query: selector stage*
selector: "{" [matcher ("," matcher)* [","]] "}"
matcher: NAME OP string

?stage: line_filter
      | "|" parser_stage
      | "|" label_filter -> label_filter_stage
      | "|" formatter

line_filter: LINE_OP filter_value (OR filter_value)*
filter_value: string | IP "(" string ")" -> ip_filter

parser_stage: JSON [extraction ("," extraction)*] -> json
            | LOGFMT logfmt_flag* [extraction ("," extraction)*] -> logfmt
            | REGEXP string -> regexp
            | PATTERN string -> pattern
            | UNPACK -> unpack
logfmt_flag: FLAG
extraction: NAME [OP string]

formatter: LINE_FORMAT string -> line_format
         | LABEL_FORMAT label_fmt ("," label_fmt)* -> label_format
         | KEEP keep_item ("," keep_item)* -> keep
         | DROP keep_item ("," keep_item)* -> drop
         | DECOLORIZE -> decolorize
         | UNWRAP unwrap_target -> unwrap
         | DISTINCT names -> distinct
label_fmt: NAME OP (NAME | string)
keep_item: NAME [OP string]
unwrap_target: NAME | conv "(" NAME ")"
!conv: "bytes" | "duration_seconds" | "duration"

?label_filter: lf_or
?lf_or: lf_and | lf_or OR lf_and -> lf_or
?lf_and: lf_atom
       | lf_and AND lf_atom -> lf_and
       | lf_and "," lf_atom -> lf_and
       | lf_and lf_atom -> lf_and
?lf_atom: "(" lf_or ")"
        | NAME OP string -> lf_string
        | NAME OP lf_value -> lf_compare
        | NAME OP IP "(" string ")" -> lf_ip
lf_value: NUMBER | DURATION | BYTES

range_call: RANGE_FN "(" range_arg ")" [grouping]
          | QUANTILE_OVER_TIME "(" number "," range_arg ")" [grouping]
range_arg: log_query range [offset]
         | "(" log_query ")" range [offset]
range: "[" DURATION "]"
offset: OFFSET DURATION

vector_call: VECTOR_AGG grouping "(" call_args ")"
           | VECTOR_AGG "(" call_args ")" [grouping]
call_args: expr ("," expr)*
grouping: (BY | WITHOUT) "(" [names] ")"

simple_call: FN_NAME "(" [fn_args] ")"
fn_args: fn_arg ("," fn_arg)*
?fn_arg: expr | string
           | LABEL_REPLACE "(" expr "," string "," string "," string "," string ")" -> label_replace

string: STRING

OR: "or"
AND: "and"
UNLESS: "unless"
BOOL: "bool"
ON: "on"
IGNORING: "ignoring"
GROUP_LEFT: "group_left"
GROUP_RIGHT: "group_right"
BY: "by"
WITHOUT: "without"
OFFSET: "offset"
JSON: "json"
LOGFMT: "logfmt"
REGEXP: "regexp"
PATTERN: "pattern"
UNPACK: "unpack"
LINE_FORMAT: "line_format"
LABEL_FORMAT: "label_format"
KEEP: "keep"
DROP: "drop"
DECOLORIZE: "decolorize"
UNWRAP: "unwrap"
DISTINCT: "distinct"
IP: "ip"
LABEL_REPLACE: "label_replace"
RANGE_FN: "count_over_time" | "rate_counter" | "rate" | "bytes_over_time" | "bytes_rate"
        | "absent_over_time" | "sum_over_time" | "avg_over_time" | "min_over_time"
        | "max_over_time" | "first_over_time" | "last_over_time" | "stdvar_over_time"
        | "stddev_over_time"
QUANTILE_OVER_TIME: "quantile_over_time"
VECTOR_AGG: "sum" | "avg" | "min" | "max" | "count" | "stddev" | "stdvar" | "topk"
          | "bottomk" | "sort_desc" | "sort" | "approx_topk" | "count_values"
FN_NAME: "vector" | "absent" | "label_join" | "scalar" | "time" | "timestamp"
FLAG: /--(strict|keep-empty)/

LINE_OP: "|=" | "!=" | "|~" | "!~" | "|>" | "!>"
OP: "=~" | "!~" | "!=" | "==" | ">=" | "<=" | ">" | "<" | "="
CMP: "==" | "!=" | ">=" | "<=" | ">" | "<"
ADD: "+" | "-"
MUL: "*" | "/" | "%"
POW: "^"

BYTES.3: /[0-9]+(\.[0-9]+)?([kKmMgGtTpPeE]i?)?[bB](?![a-zA-Z0-9_])/
DURATION.2: /([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h|d|w|y))+/
NUMBER: /0[xX][0-9a-fA-F]+/
      | /[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?/
      | /\.[0-9]+([eE][-+]?[0-9]+)?/
      | /[iI][nN][fF]|[nN][aA][nN]/
NAME: /[a-zA-Z_][a-zA-Z0-9_.]*/
STRING: /"(?:[^"\\\n]|\\.)*"/ | /`[^`]*`/

COMMENT: /#[^\n]*/
%import common.WS
%ignore WS
%ignore COMMENT
"""
