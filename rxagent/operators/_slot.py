"""A one-subscription holder for rxagent's own operators, lighter than reactivex's disposables."""

from __future__ import annotations

from collections.abc import Callable

from reactivex import abc

__all__ = ["Slot"]


class Slot(abc.DisposableBase):
    """Holds the current inner subscription of an operator; disposing it disposes that and runs a hook.

    reactivex's ``SingleAssignmentDisposable``, ``SerialDisposable`` and ``CompositeDisposable`` each take
    an ``RLock`` and a few calls per operation; an operator that frames every agent step needs one holder
    per subscription, and rxagent's operators run on the event loop's thread (their sources are
    loop-bound), so a plain object does.

    Assigning :attr:`current` disposes the subscription it replaces; assigning after :meth:`dispose`
    disposes the new one at once. :meth:`release` lets go of the current subscription (disposing it)
    without disposing the slot.
    """

    __slots__ = ("_current", "_on_dispose", "is_disposed")

    def __init__(self, on_dispose: Callable[[], None] | None = None) -> None:
        self._current: abc.DisposableBase | None = None
        self._on_dispose = on_dispose
        self.is_disposed = False

    @property
    def current(self) -> abc.DisposableBase | None:
        """The subscription held now."""
        return self._current

    @current.setter
    def current(self, subscription: abc.DisposableBase | None) -> None:
        if self.is_disposed:
            if subscription is not None:
                subscription.dispose()
            return
        previous, self._current = self._current, subscription
        if previous is not None:
            previous.dispose()

    def release(self) -> None:
        """Dispose the held subscription (the source has ended) and hold nothing."""
        previous, self._current = self._current, None
        if previous is not None:
            previous.dispose()

    def dispose(self) -> None:
        """Dispose the held subscription, then run the hook; later calls do nothing."""
        if self.is_disposed:
            return
        self.is_disposed = True
        self.release()
        hook, self._on_dispose = self._on_dispose, None
        if hook is not None:
            hook()
