"""The analysis of one file (seeded with what the rest of its project says), as the facts every rule reads.

- ``facts``: what the pass records, and the scopes of names;
- ``core``: small readings of nodes and values;
- ``statements``: the walk of statements and control flow;
- ``expressions``: what expressions hold, calls of the file's own values;
- ``torchcalls``: calls into torch and moves;
- ``moduleclasses``: ``nn.Module`` classes;
- ``projectcalls``: calls across the files of a project;
- ``analyzer``: the pass that ties them, and the propagation of placements.
"""

from .analyzer import Analyzer, analyze
from .moduleclasses import class_holds_state, class_places_itself
from .projectcalls import call_shape
from .facts import Scope

__all__ = ["Analyzer", "Scope", "analyze", "call_shape", "class_holds_state", "class_places_itself"]
