"""How rxagent's data shows itself: a registry of displays by type, filled by the layer that draws them.

A ``Msg``, an event, an ``AgentState`` or a ``Toolkit`` shows as HTML in a notebook and as text in
IPython, but the code that draws them (:mod:`rxagent.notebook`) sits at the top of the layers: it imports
the agent, which imports everything else. Data that imported its display would make the bottom layer
depend on the top one. So the data only asks this registry: :class:`Displayable` gives a class the
``_repr_html_`` and ``_repr_pretty_`` hooks IPython calls, and they look up the display registered for the
object's class; :mod:`rxagent.notebook` registers its displays when it is imported.

Nobody has to import the notebook package to get them: ``rxagent/__init__.py``, the package's facade and
the top of the layers, hands this registry a loader that imports it (:func:`load_on_first_lookup`), run
by the first lookup. ``import rxagent`` stays light, and a message that is the value of a notebook cell
still renders as HTML.

A lookup follows the method resolution order: a display registered for ``EventHeader`` shows every event
class that has none of its own. Registering a class again replaces its display, so an application can
draw rxagent's objects (or its own :class:`Displayable` classes) its own way.

Example:
    >>> class Note(Displayable):
    ...     def __init__(self, text: str) -> None:
    ...         self.text = text
    >>> register(Note, html=lambda note: f"<i>{note.text}</i>", text=lambda note: note.text)
    >>> shown = lookup(Note)
    >>> shown.html(Note("hi")) if shown else None
    '<i>hi</i>'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

__all__ = ["Display", "Displayable", "load_on_first_lookup", "lookup", "register"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Display(Generic[_T]):
    """How objects of one class show: ``html`` for notebooks, ``text`` for IPython's plain-text form."""

    html: Callable[[_T], str]
    text: Callable[[_T], str]


_displays: dict[type[Any], Display[Any]] = {}
_loaders: list[Callable[[], object]] = []


def register(cls: type[_T], *, html: Callable[[_T], str], text: Callable[[_T], str]) -> None:
    """Show objects of ``cls`` (and of its subclasses without a display of their own) with these
    functions; replaces the display ``cls`` had.

    Raises:
        TypeError: ``cls`` is not a class, or ``html`` or ``text`` is not callable.
    """
    if not isinstance(cls, type):  # pyright: ignore[reportUnnecessaryIsInstance]  # untyped callers
        raise TypeError(f"register() needs a class, not {cls!r}")
    if not callable(html) or not callable(text):  # pyright: ignore[reportUnnecessaryComparison]
        raise TypeError(f"register({cls.__qualname__}) needs callable html and text")
    _displays[cls] = Display(html, text)


def load_on_first_lookup(loader: Callable[[], object]) -> None:
    """Run ``loader`` (which imports a module that registers displays) before the next lookup.

    A loader runs once. One that raises stays pending, and its error comes out of that lookup and of the
    next ones, so a display that cannot load says why each time instead of silently falling back.
    """
    _loaders.append(loader)


def lookup(cls: type[_T]) -> Display[_T] | None:
    """The display of ``cls``: its own, else that of the nearest class in its method resolution order
    that has one; ``None`` when none has. Runs the pending loaders first.
    """
    while _loaders:
        loader = _loaders.pop(0)
        try:
            loader()
        except BaseException:
            _loaders.insert(0, loader)
            raise
    for klass in cls.__mro__:
        found = _displays.get(klass)
        if found is not None:
            return cast("Display[_T]", found)
    return None


class Displayable:
    """Base for data that shows itself through this registry: IPython's ``_repr_html_`` and
    ``_repr_pretty_`` hooks, answered by the display registered for the object's class.

    Without one, there is no HTML form and the text form is the object's ``repr``.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # IPython's text form takes the first of _repr_pretty_ and __repr__ it finds along the MRO, so a
        # subclass's own __repr__ (every dataclass has one, BaseModel has one) would hide an inherited
        # hook: each subclass gets the hook it inherits in its own namespace. A slotted dataclass is
        # built twice, and the rebuilt class comes through here too.
        super().__init_subclass__(**kwargs)
        cls._repr_pretty_ = cls._repr_pretty_

    def _repr_html_(self) -> str | None:
        shown = lookup(type(self))
        return None if shown is None else shown.html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        shown = lookup(type(self))
        printer.text(repr(self) if shown is None else shown.text(self))
