"""What a command will need later, so that preflight checks exactly that."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.spec.models import LoadedSpec


@dataclass(frozen=True)
class Scope:
    """`environment`: the pointer the command reads (and may move); `starts_server`: the
    command builds or restores an artifact and starts a server here; `reads_source`: it
    reads the model from `model.source`; `publishes`: it writes to the store;
    `needs_release`: it takes the release current in the environment the policy requires."""

    environment: str | None
    starts_server: bool
    reads_source: bool
    publishes: bool
    needs_release: bool = False

    @classmethod
    def for_run(cls, loaded: LoadedSpec, promote_to: str | None, attached: bool,
                chosen: frozenset[str], reverifies: bool = False) -> Scope:
        """A pipeline run: `chosen` stages, on a server of our own unless `attached`;
        `reverifies` when it re-measures an existing release (promotion checked it)."""
        uses_source = not reverifies and ("build" in chosen or "parity" in chosen)
        return cls(environment=promote_to or loaded.environment,
                   starts_server=not attached and "start" in chosen,
                   reads_source=uses_source, publishes="publish" in chosen)

    @classmethod
    def for_promotion(cls, loaded: LoadedSpec, environment: str | None) -> Scope:
        """What `promote <environment>` would need (`run` when no environment is given)."""
        policy = loaded.policy
        takes_release = environment is not None and bool(policy.requires)
        starts = not takes_release or policy.reverify
        return cls(environment=environment, starts_server=starts,
                   reads_source=not takes_release, publishes=True,
                   needs_release=takes_release)
