"""TraceQL's grammar for lark (LALR), after Tempo's ``pkg/traceql/expr.y`` and its lexer.

Precedence, loosest first, as Tempo's yacc declarations give it: the pipe; the spanset
operators ``&&`` and ``||`` (one level, left to right); the structural operators
(``>>``, ``>``, ``<<``, ``<``, ``~``, their ``!`` negations and ``&`` unions), binding
tighter than ``&&``/``||``. Inside ``{ }`` the same holds for fields: ``&&`` and ``||``
on one level, left to right, comparisons binding tighter, ``!`` tighter still.

Metrics queries (``| rate()``...), arithmetic and query hints (``with(...)``) parse only
as far as needed to be accepted or refused by name (:mod:`shoal.traceql.parser`).
"""

GRAMMAR = r"""
?start: pipeline
      | pipeline "with" "(" hint ("," hint)* ")"  -> with_hints

hint: HINT_NAME "=" literal

pipeline: stage ("|" stage)*

?stage: spanset_expr
      | scalar_filter
      | "by" "(" field_expr ")"                  -> by_op
      | "select" "(" field ("," field)* ")"      -> select_op
      | "coalesce" "(" ")"                       -> coalesce_op
      | METRICS_FN "(" METRICS_ARGS? ")" ("by" "(" METRICS_ARGS ")")?  -> metrics_op

?spanset_expr: spanset_expr SPANSET_LOGIC spanset_term  -> spanset_logic
             | spanset_term

?spanset_term: spanset_term STRUCTURAL spanset_atom     -> structural
             | spanset_atom

?spanset_atom: "{" "}"                   -> match_all
             | "{" field_expr "}"        -> spanset_filter
             | "(" pipeline ")"

scalar_filter: aggregate COMPARE scalar_literal
             | scalar_literal COMPARE aggregate        -> scalar_filter_flipped

aggregate: AGG_FN "(" field_expr? ")"

?field_expr: field_expr FIELD_LOGIC field_cmp   -> field_logic
           | field_cmp

?field_cmp: field_arith COMPARE field_arith    -> compare
          | field_arith

?field_arith: field_arith ARITH field_unary     -> arithmetic
            | field_arith "-" field_unary       -> arithmetic
            | field_unary

?field_unary: "!" field_unary               -> negate
            | field_primary

?field_primary: "(" field_expr ")"
              | field
              | literal

field: ATTRIBUTE             -> attribute
     | SCOPED_INTRINSIC      -> scoped_intrinsic
     | INTRINSIC             -> intrinsic

scalar_literal: literal

literal: STRING              -> string
       | DURATION            -> duration
       | NUMBER              -> number
       | "-" DURATION        -> neg_duration
       | "-" NUMBER          -> neg_number
       | "true"              -> true
       | "false"             -> false
       | "nil"               -> nil
       | STATUS              -> status
       | KIND                -> kind
       | INT_BOUND           -> int_bound

SPANSET_LOGIC: "&&" | "||"
FIELD_LOGIC: "&&" | "||"
STRUCTURAL.2: "!>>" | "!<<" | "&>>" | "&<<" | ">>" | "<<" | "!>" | "!<" | "&>" | "&<"
            | "&~" | "~" | ">" | "<" | "!~"
COMPARE.3: "=~" | "!~" | "!=" | ">=" | "<=" | "=" | ">" | "<"
ARITH: "+" | "*" | "/" | "%" | "^"

AGG_FN: "count" | "avg" | "min" | "max" | "sum"
METRICS_FN.2: "rate" | "count_over_time" | "min_over_time" | "max_over_time" | "avg_over_time"
            | "sum_over_time" | "quantile_over_time" | "histogram_over_time" | "compare"
            | "topk" | "bottomk"

METRICS_ARGS: /[^()]+/
HINT_NAME: /[A-Za-z_][A-Za-z0-9_]*/
STATUS.2: "ok" | "error" | "unset"
KIND.2: "unspecified" | "internal" | "server" | "client" | "producer" | "consumer"
INT_BOUND.2: "minInt" | "maxInt"
INTRINSIC.2: "rootServiceName" | "rootService" | "rootName" | "traceDuration"
           | "statusMessage" | "status" | "name" | "kind" | "duration" | "childCount"
           | "nestedSetLeft" | "nestedSetRight" | "nestedSetParent"
           | "traceID" | "spanID" | "parentID" | "id" | "parent"
SCOPED_INTRINSIC.3: /(span|trace|event|link|instrumentation):[A-Za-z]+/
ATTRIBUTE.3: /(span|resource|event|link|instrumentation|parent)?\.
              ("(\\.|[^"\\])*"|[^\s{}()=!<>~&|,"])+/x

DURATION.4: /([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+/
NUMBER: /[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?/ | /\.[0-9]+([eE][+-]?[0-9]+)?/
STRING: /"(\\.|[^"\\])*"/ | /`[^`]*`/

%import common.WS
%ignore WS
"""
