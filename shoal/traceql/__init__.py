"""shoal.traceql: Tempo's query language and HTTP API over the ``spans`` table.

``service.TraceQLService`` is the one entry point (trace by id, search, tags, tag
values); the grammar and parser, the plan and its column-wise evaluation live beside it.
"""
