"""The script's own choice of the CPU, seen while it runs.

A script that moves its model with ``model.to(device)`` where its device line chose the CPU
(``device = torch.device("cuda" if args.cuda else "cpu")`` with ``--cuda`` not given, or
``torch.device("cpu")`` outside an ``if args.accel:``) trains on the CPU under verify: the
model was moved, to what the script picked. Blaming CG101 ("the model was never moved")
would send the user after the wrong line. Here the run notes where the user's code moved a
module to the CPU before the first training step (a ``model.to("cpu")`` to save it comes
after), and the opt-in flags of its argument parser that would pick the accelerator
(``--accel``, ``--cuda``, ``--use-gpu``) and were not given, so that the verdict can name both.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable

import torch

from ..records import DeviceChoiceRecord, FlagOff

# an option that asks for the accelerator: --cuda, --gpu, --use-gpu, --accel, --mps, --use_accelerator
_ASKS_FOR_DEVICE = re.compile(r"^--?(use[-_]?)?(cuda|gpus?|accel(erator)?|mps|xpu)$")
_MAX_PLACES = 3


class DeviceChoice:
    def __init__(self, user_location: Callable[[Any], Any], trained: Callable[[], bool]):
        self.user_location = user_location
        self.trained = trained  # a move to the CPU after a step is a copy to save or to read, not the choice
        self.moved_to_cpu: list[dict] = []  # where the user's code moved a module to the CPU
        self.opt_in: dict[str, FlagOff] = {}  # dest -> the option that picks the accelerator, and its help
        self.flags_off: list[FlagOff] = []  # those options, as the last parse left them: not given

    def on_module_to(self, args: tuple, kwargs: dict, frame: Any) -> None:
        if self.trained():
            return
        target = kwargs.get("device", args[0] if args else None)
        if not isinstance(target, (str, torch.device)):
            return  # a dtype, a tensor, or nothing: not a choice of device
        try:
            if torch.device(target).type != "cpu":
                return
        except (RuntimeError, TypeError):
            return
        where = self.user_location(frame)
        if where is not None and where not in self.moved_to_cpu and len(self.moved_to_cpu) < _MAX_PLACES:
            self.moved_to_cpu.append(where)

    def on_add_argument(self, action: argparse.Action) -> None:
        if action.const is not True or action.default not in (False, None):
            return  # only a switch that turns the accelerator on (`--no-cuda` turns it off)
        names = [name for name in action.option_strings if _ASKS_FOR_DEVICE.match(name)]
        if names:
            self.opt_in[action.dest] = {"option": names[-1], "help": action.help or ""}

    def on_parsed(self, namespace: Any) -> None:
        self.flags_off = [flag for dest, flag in self.opt_in.items() if getattr(namespace, dest, None) is not True]

    def report(self, display: Callable[[str], str]) -> DeviceChoiceRecord:
        return {"moved_to_cpu": [{"file": display(w["file"]), "line": w["line"]} for w in self.moved_to_cpu],
                "flags_off": self.flags_off}


def install(choice: DeviceChoice) -> None:
    """Watch nn.Module.to and the argument parsers of the script."""
    module_to = torch.nn.Module.to

    def to(self, *args, **kwargs):
        choice.on_module_to(args, kwargs, sys._getframe(1))
        return module_to(self, *args, **kwargs)

    setattr(torch.nn.Module, "to", to)  # a monkey-patch: setattr, as mypy rejects assigning to a method

    # on the container class: parser.add_argument_group(...).add_argument(...) as well
    add_argument = argparse._ActionsContainer.add_argument
    parse_known_args = argparse.ArgumentParser.parse_known_args

    def watched_add_argument(self, *args, **kwargs):
        action = add_argument(self, *args, **kwargs)
        choice.on_add_argument(action)
        return action

    def watched_parse_known_args(self, *args, **kwargs):
        namespace, extras = parse_known_args(self, *args, **kwargs)
        choice.on_parsed(namespace)
        return namespace, extras

    setattr(argparse._ActionsContainer, "add_argument", watched_add_argument)
    setattr(argparse.ArgumentParser, "parse_known_args", watched_parse_known_args)
