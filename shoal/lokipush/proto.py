"""Loki's push messages (``logproto.PushRequest``), described in code for ptars.

Field numbers as Loki's ``pkg/push/push.proto`` defines them; ``google.protobuf.
Timestamp`` is described here too (seconds, nanos), under this file's package, since
ptars decodes by descriptor and the message's wire form is all that matters.
"""

from __future__ import annotations

from shoal.rows.protoarrow import FIELD as _F
from shoal.rows.protoarrow import ProtoArrow, file_descriptor

PUSH_FILE = file_descriptor(
    "logproto",
    {
        "PushRequest": [("streams", 1, _F.TYPE_MESSAGE, True, ".logproto.StreamAdapter")],
        "StreamAdapter": [
            ("labels", 1, _F.TYPE_STRING),
            ("entries", 2, _F.TYPE_MESSAGE, True, ".logproto.EntryAdapter"),
        ],
        "EntryAdapter": [
            ("timestamp", 1, _F.TYPE_MESSAGE, False, ".logproto.Timestamp"),
            ("line", 2, _F.TYPE_STRING),
            ("structuredMetadata", 3, _F.TYPE_MESSAGE, True, ".logproto.LabelPairAdapter"),
        ],
        "LabelPairAdapter": [("name", 1, _F.TYPE_STRING), ("value", 2, _F.TYPE_STRING)],
        "Timestamp": [("seconds", 1, _F.TYPE_INT64), ("nanos", 2, _F.TYPE_INT32)],
    },
)

PUSH_REQUEST = "logproto.PushRequest"

DECODER = ProtoArrow(lambda: [PUSH_FILE.SerializeToString()])
