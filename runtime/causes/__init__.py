"""From an exception or an event to a cause and a rule: a device mistake, a failed download, a missing package or data.

- ``diagnose``: the cause of a failing run's first exception, and the rule that would have caught it;
  ``culprits``: the value on a failing line that stayed on the CPU, and a finding in its rule's declared
  words; ``frames``: the user's failing frames; ``values``: what the values in them are;
- ``downloads``, ``missingpkg``, ``needsdata``: a failed download, a missing package, missing data: the
  environment's, not the migration's.
"""
