"""The verdict of `spade check`, as objects."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Finding:
    """One finding: `code` is stable (docs/check-and-fuzz.md lists them), `severity` is
    "error" or "warning", `kind` the error kind behind it, `seed` its episode's seed and
    `trajectory` that episode's recording (JSON Lines for `spade replay`), when it has one."""

    code: str
    severity: str
    message: str
    kind: str | None = None
    seed: int | None = None
    trajectory: str | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether an environment may enter training (`accepted`: no error findings)."""

    accepted: bool
    class_name: str | None
    max_turns: int | None
    tool_use: bool
    probes: list
    findings: list
    stats: dict

    @classmethod
    def from_report(cls, report, trajectories):
        findings = [
            Finding(
                code=f["code"],
                severity=f["severity"],
                message=f["message"],
                kind=f.get("kind"),
                seed=f.get("seed"),
                trajectory=trajectory,
            )
            for f, trajectory in zip(report["findings"], trajectories, strict=True)
        ]
        return cls(
            accepted=report["accepted"],
            class_name=report.get("class_name"),
            max_turns=report.get("max_turns"),
            tool_use=report["tool_use"],
            probes=list(report["probes"]),
            findings=findings,
            stats=dict(report["stats"]),
        )

    @property
    def errors(self):
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self):
        return [f for f in self.findings if f.severity != "error"]
