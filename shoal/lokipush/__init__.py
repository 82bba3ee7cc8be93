"""Loki's push API as a protocol codec: ``POST /loki/api/v1/push`` bodies to rows of
the ``logs`` table, pure and fuzzed.

:func:`shoal.lokipush.decode.decode` reads a ``logproto.PushRequest`` (protobuf, after
snappy) or Loki's JSON push body. Stream labels land in ``resource_attributes``, an
entry's structured metadata in ``attributes``, the line in ``body``; the rows carry
``scope_name`` :data:`shoal.schema.LOKI_PUSH_SCOPE`, so that LogQL reads their labels
back exactly as they were pushed (docs/schema.md, docs/rationale.md).
"""
