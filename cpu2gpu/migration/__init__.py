"""The static half of ``cpu2gpu migrate``: where a value a run located was bound, and the edit there."""

from .binding import Evidence
from .repair import Repair, repair, rule_fix

__all__ = ["Evidence", "Repair", "repair", "rule_fix"]
