"""What the controls send: the Run settings as one value (`RunSettings`: the RunSpec asked for and Multi-turn, checked
and resolved into a run once by `RunSpec.resolve`) and how the lanes are drawn (`View`, the toggles)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.server import limits
from poss_core.base import settings
from poss_core.base.errors import PromptError
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


@dataclass
class RunSettings:
    """The Run settings as the controls send them: the comparison asked for (`asked`, a RunSpec holding the prompt,
    the preset, the methods and every setting the app offers as sent: a slider's 4.0 for an integer) and whether
    Multi-turn is ticked. Nothing is checked here: `resolved` hands it to `RunSpec.resolve`, the one check."""

    asked: RunSpec
    multi_turn: bool = False

    @classmethod
    def from_named(cls, by: dict[str, Any]) -> "RunSettings":
        """From the controls' values by name: the prompt, Multi-turn, the preset, the methods and one value per
        APP_SETTINGS name. An unset choice (a radio Gradio sends as None) reads its default; anything else goes on
        as sent."""
        values = {n: by[n] for n in APP_SETTINGS if not (by[n] in (None, "") and settings.SETTINGS[n].choices)}
        return cls(RunSpec(by["prompt"], by["methods"], by["preset"], **values), by["multi_turn"])

    def resolved(self, history: list[dict]) -> Resolved:
        """What a comparison runs, checked and resolved once by `RunSpec.resolve` (PossError with a readable
        message; the handlers pass the result down as it is): the prompt, after `history` when Multi-turn is ticked,
        the chosen methods once each in the preset's order, every setting typed and in bounds, and no more new tokens
        than this server gives a run."""
        prompt = self.asked.prompt
        if prompt is None or (isinstance(prompt, str) and not prompt.strip()):
            raise PromptError("the prompt is empty: type a question or instruction (or pick an example).")
        turn = {"role": "user", "content": prompt}
        if self.multi_turn and history:
            message: str | list[dict] = [*history, turn]
        else:  # a prompt that is not text goes in as one message, so the run's check says "prompt must be text"
            message = prompt if isinstance(prompt, str) else [turn]
        chosen = self.asked.methods or []
        if isinstance(chosen, (list, tuple)):
            chosen = list(dict.fromkeys(chosen))  # a checkbox group's values, once each
        asked = replace(self.asked, prompt=message, methods=chosen)
        # `python app.py --max-new-tokens`: the UI's slider stops there too.
        return asked.resolve(most_new_tokens=limits.LIMITS.max_new_tokens, preset_order=True)
