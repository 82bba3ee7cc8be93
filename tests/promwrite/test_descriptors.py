"""The message descriptors written as ``.proto`` text: what a field line becomes, and
text that is not a message refused rather than read in part."""

from __future__ import annotations

import pytest

from shoal.rows.protoarrow import FIELD, file_descriptor


def test_fields_become_their_descriptors() -> None:
    proto = file_descriptor(
        "p.q",
        """
        message Outer { repeated Inner inners = 1; Inner one = 2; sint64 n = 7; }
        message Inner { repeated bytes raw = 3; }
        """,
    )
    outer, inner = proto.message_type
    assert [(f.name, f.number, f.type, f.label, f.type_name) for f in outer.field] == [
        ("inners", 1, FIELD.TYPE_MESSAGE, FIELD.LABEL_REPEATED, ".p.q.Inner"),
        ("one", 2, FIELD.TYPE_MESSAGE, FIELD.LABEL_OPTIONAL, ".p.q.Inner"),
        ("n", 7, FIELD.TYPE_SINT64, FIELD.LABEL_OPTIONAL, ""),
    ]
    assert [(f.name, f.type, f.label) for f in inner.field] == [
        ("raw", FIELD.TYPE_BYTES, FIELD.LABEL_REPEATED)
    ]
    assert (proto.package, proto.syntax) == ("p.q", "proto3")


@pytest.mark.parametrize(
    "source",
    [
        "message A { int32 x = 1 }",
        "messge A { int32 x = 1; }",
        "message A { int32 x = 1; } trailing",
        "message A { message B { } }",
    ],
)
def test_text_that_is_not_messages_is_refused(source: str) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        file_descriptor("p", source)
