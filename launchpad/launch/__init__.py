"""The launch: the two executors of a spec and what they share.

:mod:`.executor` chooses between the compiled executor (the C module built from ``_claunch/``)
and the generated Python one (:mod:`.pylaunch`), and plans the compiled one's work;
:mod:`.checks` converts and checks argument values, :mod:`.memory` allocates what one launch
needs (scratch, device copies of host arrays), :mod:`.refusals` words every refusal (and
:mod:`.describe` how a refusal names a value), and
:mod:`.hooks` holds the launch-hook registry front ends add to.

Imports: ``launchpad.core`` and ``launchpad.errors``, nothing above them. Front ends register
their argument converters and hooks here at import; nothing here imports a front end.
"""
