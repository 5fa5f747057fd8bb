"""Old names kept importable for one release after a rename: they warn, and give the renamed object."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

__all__ = ["renamed"]


def renamed(module: str, names: Mapping[str, tuple[str, object]]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for ``module``'s renamed names: ``{old: (new name, object)}``.

    Reading an old name warns with a ``DeprecationWarning`` that says the new name and returns the object;
    any other missing name raises ``AttributeError`` as usual.

    Example:
        >>> __getattr__ = renamed("pkg", {"Old": ("New", int)})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     __getattr__("Old") is int, str(caught[0].message)
        (True, 'pkg.Old is renamed New; the old name goes in the next release')
    """

    def __getattr__(name: str) -> object:
        found = names.get(name)
        if found is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new, value = found
        warnings.warn(
            f"{module}.{name} is renamed {new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__
