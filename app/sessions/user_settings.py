"""What the controls send: the Run settings as one value (`RunSettings`, one per setting the app offers, checked and
resolved into a run once by `RunSpec.resolve`) and how the lanes are drawn (`View`, the toggles)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.server import limits
from poss_core.base import settings
from poss_core.base.errors import ConfigError, PromptError
from poss_core.runtime.run_spec import Resolved, RunSpec

POOLED_VIEW = "all my runs"  # the charts' source control: "this run", this, or CLASS_VIEW
CLASS_VIEW = "everyone on this server"  # every finished live run on the server, pooled (app/server/class_pool.py)


@dataclass
class View:
    """How the lanes are drawn (the toggles); nothing here changes what runs."""

    color_by: str = "position"  # or "specialist"
    show_rejected: bool = False
    conditional: bool = True
    pooled: bool = False  # the charts pool every run this tab decoded on the preset ("All my runs")
    everyone: bool = False  # the charts pool every finished live run on this server ("everyone on this server")

    @classmethod
    def from_controls(
        cls, color_by: str, show_rejected: bool, pos_acc_mode: str, charts_from: str | bool = "this run"
    ) -> "View":
        """From the view controls' values (radio labels and a checkbox)."""
        return cls(
            color_by="specialist" if str(color_by).startswith("spec") else "position",
            show_rejected=bool(show_rejected),
            conditional=not str(pos_acc_mode).startswith("uncond"),
            pooled=charts_from is True or str(charts_from) == POOLED_VIEW,
            everyone=str(charts_from) == CLASS_VIEW,
        )

    @classmethod
    def from_named(cls, by: dict[str, Any]) -> "View":
        """From the view controls' values by name (VIEW_INPUTS)."""
        return cls.from_controls(*(by[n] for n in VIEW_INPUTS))


VIEW_INPUTS = ("color_by", "show_rejected", "pos_acc_mode", "charts_from")  # View.from_controls's order


APP_SETTINGS = settings.offered_on(settings.APP)  # the Run controls after the prompt, preset and methods


class RunSettings(settings.ByName):
    """The Run settings as the UI holds them: the prompt, Multi-turn, the preset, the methods, and the value of every
    setting the app offers (`APP_SETTINGS`, by name, as the controls send them: a slider's 4.0 for an integer)."""

    def __init__(self, prompt: str, multi_turn: bool, preset: str, methods: list[str], **values: Any) -> None:
        self.prompt, self.multi_turn, self.preset, self.methods = prompt, multi_turn, preset, methods
        self.values = values

    @classmethod
    def from_named(cls, by: dict[str, Any]) -> "RunSettings":
        """From the controls' values by name: the prompt, Multi-turn, the preset, the methods and one value per
        APP_SETTINGS name."""
        return cls(by["prompt"], by["multi_turn"], by["preset"], by["methods"], **{n: by[n] for n in APP_SETTINGS})

    def resolved(self, history: list[dict]) -> Resolved:
        """What a comparison runs, checked and resolved once, here where the input arrives (`RunSpec.resolve` raises
        PossError with a readable message; the handlers pass the result down as it is): the prompt, after `history`
        when Multi-turn is ticked, the chosen methods once each in the preset's order, every setting typed and in
        bounds, and no more new tokens than this server gives a run."""
        if self.prompt is None or (isinstance(self.prompt, str) and not self.prompt.strip()):
            raise PromptError("the prompt is empty: type a question or instruction (or pick an example).")
        turn = {"role": "user", "content": self.prompt}
        if self.multi_turn and history:
            message: str | list[dict] = [*history, turn]
        else:  # a prompt that is not text goes in as one message, so the run's check says "prompt must be text"
            message = self.prompt if isinstance(self.prompt, str) else [turn]
        chosen = self.methods or []
        if isinstance(chosen, (list, tuple)):
            chosen = list(dict.fromkeys(chosen))  # a checkbox group's values, once each
        # An unset choice (a radio Gradio sends as None) reads its default; anything else is checked as sent.
        values = {k: v for k, v in self.values.items() if not (v in (None, "") and settings.SETTINGS[k].choices)}
        run = RunSpec(message, chosen, self.preset, **values).resolve()
        spec = run.spec
        spec.methods.sort(key=list(run.offered).index)
        most = limits.LIMITS.max_new_tokens  # `python app.py --max-new-tokens`; the UI's slider stops there too
        if most is not None and spec.max_new_tokens > most:
            raise ConfigError(
                f"max_new_tokens={spec.max_new_tokens} is more than this server gives one run "
                f"({most}, so that every visitor gets a turn): ask for {most} or fewer."
            )
        return run
