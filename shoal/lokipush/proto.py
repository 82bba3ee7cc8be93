"""Loki's push messages (``logproto.PushRequest``), described in code for ptars.

Field numbers as Loki's ``pkg/push/push.proto`` defines them; ``google.protobuf.
Timestamp`` is described here too (seconds, nanos), under this file's package, since
ptars decodes by descriptor and the message's wire form is all that matters.
"""

from __future__ import annotations

from shoal.rows.protoarrow import ProtoArrow, file_descriptor

PUSH_FILE = file_descriptor(
    "logproto",
    """
    message PushRequest { repeated StreamAdapter streams = 1; }
    message StreamAdapter { string labels = 1; repeated EntryAdapter entries = 2; }
    message EntryAdapter {
      Timestamp timestamp = 1;
      string line = 2;
      repeated LabelPairAdapter structuredMetadata = 3;
    }
    message LabelPairAdapter { string name = 1; string value = 2; }
    message Timestamp { int64 seconds = 1; int32 nanos = 2; }
    """,
)

PUSH_REQUEST = "logproto.PushRequest"

DECODER = ProtoArrow(lambda: [PUSH_FILE.SerializeToString()])
