"""What the spec knows of a server kind, handed in by the caller.

The spec sits below the servers (their kinds import it), so it names no kind itself: each
kind's folder holds its `KindSpec` (`pipeline/servers/<kind>/spec.py`), and whoever loads
or describes a spec passes them in as `KindSpecs` (`pipeline/servers/kinds.py` builds the
one mapping from the registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.spec.problems import Rule
from pipeline.spec.strict import StrictModel


@dataclass(frozen=True)
class KindSpec:
    """One kind's spec facts: the name `server.kind` gives it, its named ports and their
    production numbers, its cross-key rules, and the model of its own block
    `server.<name>:` (settings only this kind reads, e.g. its config pass-through)."""

    name: str
    production_ports: Mapping[str, int]
    settings_rules: tuple[Rule, ...]
    """What a server of this kind can run: rules on the `server` keys."""
    load_rules: tuple[Rule, ...] = ()
    """How a server of this kind can be measured: rules on the `stages` keys."""
    section: type[StrictModel] | None = None
    """The model of `server.<name>:`; None: the kind has no such block."""
    section_rules: tuple[Rule, ...] = ()
    """Rules on that block, run whenever a spec has it, whichever kind it names (`compare`
    serves one spec on both)."""
    http_port: str = "http"
    """The port (one of `production_ports`) clients send inference to over HTTP: the one
    `serve` puts its stable port in front of."""

    @property
    def port_names(self) -> tuple[str, ...]:
        """Its port names, in the table's order (the order ports are handed out in)."""
        return tuple(self.production_ports)


KindSpecs = Mapping[str, KindSpec]
"""The known kinds by name, in the order the schema and the messages list them."""
