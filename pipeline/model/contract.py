"""The output contract: every output named, shaped and typed as the spec declares it.

Parity compares the server with the reference, and the reference is the same model: a
model that breaks its declared contract agrees with itself. So both sides are held to
the spec on their own. A breach is an output missing, one the spec does not declare, or
a shape other than `[items, *shape]` (the batch dimension is implicit in the spec; a -1
takes any size).
Dtypes are judged by `parity.output_dtype`; a breach shows them beside the shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.model.tensors import Array, fits
from pipeline.spec.models import OutputSpec
from pipeline.spec.strings import dtype_name
from pipeline.stage_result import Gate

GATE = "parity.output_contract"
SIDES = ("served", "reference")


def batched(dtype: str, item_shape: Sequence[int]) -> str:
    """`float32 [n, 4]`: a dtype and a per-item shape under the implicit batch dimension."""
    return f"{dtype} [{', '.join(['n', *(str(d) for d in item_shape)])}]"


def declared(tensor: OutputSpec) -> str:
    return batched(tensor.dtype, tensor.shape)


def observed(array: Array, items: int) -> str:
    """The array as the spec would write it when its batch dimension is the number of
    items sent, else its whole shape and that number."""
    shape = list(array.shape)
    if shape and shape[0] == items:
        return batched(dtype_name(array), shape[1:])
    return f"{dtype_name(array)} {shape} for {items} items"


@dataclass(frozen=True)
class Breach:
    side: str          # "served" or "reference"
    output: str
    observed: str      # "float32 [n, 3]", "missing", ...


@dataclass
class ContractCheck:
    """Every answer parity saw, checked against the declared outputs."""

    outputs: Sequence[OutputSpec]
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIDES, 0))
    breaches: dict[Breach, list[str]] = field(default_factory=dict)
    # What the server answered for each output, as the spec would write it (the gate's
    # observed value is what came, not the declaration it was held to).
    served_forms: dict[str, dict[str, None]] = field(default_factory=dict)

    def check(self, side: str, arrays: Mapping[str, Array], items: int, label: str) -> None:
        """`arrays` (by output name) answered for `items` items in the batch `label`."""
        self.checked[side] += 1
        for tensor in self.outputs:
            array = arrays.get(tensor.name)
            if array is None:
                self._breach(Breach(side, tensor.name, "missing"), label)
            elif not (array.shape[:1] == (items,) and fits(tensor, tuple(array.shape[1:]))):
                self._breach(Breach(side, tensor.name, observed(array, items)), label)
            elif side == "served":
                self.served_forms.setdefault(tensor.name, {})[observed(array, items)] = None
        names = {tensor.name for tensor in self.outputs}
        for name in sorted(set(arrays) - names):
            self._breach(Breach(side, name, "not declared: " + observed(arrays[name], items)),
                         label)

    def _breach(self, breach: Breach, label: str) -> None:
        self.breaches.setdefault(breach, []).append(label)

    def describe(self) -> list[str]:
        """One line per output and side: what was declared, what came, on which batches."""
        kinds = {tensor.name: declared(tensor) for tensor in self.outputs}
        lines = []
        for breach, labels in self.breaches.items():
            where = "served" if breach.side == "served" else "the reference gave"
            first = labels[0] + (f" and {len(labels) - 1} more" if len(labels) > 1 else "")
            lines.append(f"{breach.output}: declared {kinds.get(breach.output, 'nothing')}, "
                         f"{where} {breach.observed} ({first})")
        return lines

    def gate(self) -> Gate:
        expected = ", ".join(f"{t.name} {declared(t)}" for t in self.outputs)
        found = self.describe()
        if found:
            return Gate(GATE, "; ".join(found), expected, False)
        unchecked = [side for side in SIDES if not self.checked[side]]
        if unchecked:
            return Gate(GATE, f"not evaluated: no {' or '.join(unchecked)} outputs to check",
                        expected, False)
        return Gate(GATE, self._served(), expected, True)

    def _served(self) -> str:
        """Each output as served: `scores float32 [n, 4]`; a shape that varied (a -1
        dimension) shows its first two forms and how many there were."""
        parts = []
        for tensor in self.outputs:
            forms = list(self.served_forms.get(tensor.name, {}))
            shown = ", ".join(forms[:2]) + (f" … ({len(forms)} forms)" if len(forms) > 2 else "")
            parts.append(f"{tensor.name} {shown}")
        return "; ".join(parts)
