"""A Collector configuration checked against tests/data/otelcol_components.json.

The data file records, per supported Collector release, the configuration keys
(mapstructure tags), component names and enum values of the components
deploy/otelcol.yaml uses; its "about" entry describes the small schema language
this module walks. Every problem is reported with its path in the YAML and the
release that rejects it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "otelcol_components.json"

# Go's time.Duration as the Collector's confmap decodes it from a string
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
SECTIONS = ("receivers", "processors", "exporters", "extensions")


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def component_type(component_id: str) -> str:
    """``otlp_grpc/shoal`` -> ``otlp_grpc``."""
    return component_id.split("/", 1)[0]


def spec_for(data: dict[str, Any], section: str, kind: str) -> dict[str, Any] | None:
    """The component a section calls ``kind`` on any recorded release (aliases included)."""
    for spec in data["components"][section].values():
        if any(kind in names for names in spec["names"].values()):
            return dict(spec)
    return None


@dataclass
class Checker:
    """Walks one configuration section against one release's schema."""

    data: dict[str, Any]
    version: str
    errors: list[str] = field(default_factory=list)

    def _fail(self, path: str, message: str) -> None:
        self.errors.append(f"{self.version}: {path}: {message}")

    def _resolve(self, schema: Any) -> Any:
        while isinstance(schema, dict) and "ref" in schema:
            schema = self.data["types"][schema["ref"]]
        return schema

    def fields(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A struct's fields on this release, the squashed ones (``extends``) included."""
        out: dict[str, Any] = {}
        if "extends" in schema:
            out.update(self.fields(self._resolve({"ref": schema["extends"]})))
        for name, sub in schema["struct"].items():
            if isinstance(sub, dict) and self.version not in sub.get("versions", [self.version]):
                continue
            out[name] = sub
        return out

    def check(self, value: Any, schema: Any, path: str) -> None:
        schema = self._resolve(schema)
        if isinstance(schema, dict) and "leaf" in schema:
            schema = schema["leaf"]
        if isinstance(schema, str):
            self._leaf(value, schema, path)
        elif "enum" in schema:
            if value not in schema["enum"]:
                self._fail(path, f"{value!r} is not one of {schema['enum']}")
        elif "list" in schema:
            if not isinstance(value, list):
                self._fail(path, f"expected a list, got {value!r}")
                return
            for i, item in enumerate(value):
                self.check(item, schema["list"], f"{path}[{i}]")
        elif "map" in schema:
            if not isinstance(value, dict):
                self._fail(path, f"expected a mapping, got {value!r}")
                return
            for key, item in value.items():
                self.check(item, schema["map"], f"{path}.{key}")
        else:
            self._struct(value, schema, path)

    def _struct(self, value: Any, schema: dict[str, Any], path: str) -> None:
        optional = bool(schema.get("optional"))
        if value is None and (optional or schema.get("nullable")):
            return
        if not isinstance(value, dict):
            self._fail(path, f"expected a mapping, got {value!r}")
            return
        fields = self.fields(schema)
        for key, item in value.items():
            if optional and key == "enabled":
                if not isinstance(item, bool):
                    self._fail(f"{path}.enabled", f"expected true or false, got {item!r}")
                continue
            if key not in fields:
                self._fail(f"{path}.{key}", f"no such key (known: {', '.join(sorted(fields))})")
                continue
            self.check(item, fields[key], f"{path}.{key}")

    def _leaf(self, value: Any, kind: str, path: str) -> None:
        ok = {
            "any": True,
            "string": isinstance(value, str),
            "bool": isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, int | float) and not isinstance(value, bool),
            "duration": (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, str) and bool(_DURATION.match(value))),
        }[kind]
        if not ok:
            self._fail(path, f"expected {kind}, got {value!r}")

    def check_config(self, doc: dict[str, Any]) -> list[str]:
        """Every component's name and configuration in ``doc`` on this release."""
        components = self.data["components"]
        for section in SECTIONS:
            for component_id, config in (doc.get(section) or {}).items():
                kind = component_type(component_id)
                spec = spec_for(self.data, section, kind)
                if spec is None or kind not in spec["names"][self.version]:
                    names = [
                        n for s in components[section].values() for n in s["names"][self.version]
                    ]
                    self._fail(f"{section}.{component_id}", f"no {section[:-1]} named {kind!r} "
                               f"(known here: {', '.join(sorted(names))})")  # fmt: skip
                    continue
                if config is not None:  # a bare `name:` takes the component's defaults
                    self.check(config, spec["config"], f"{section}.{component_id}")
        return self.errors
