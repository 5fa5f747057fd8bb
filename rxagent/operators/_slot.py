"""The loop-bound disposables of rxagent's own operators, lighter than reactivex's."""

from __future__ import annotations

from collections.abc import Callable

from reactivex import abc

__all__ = ["NO_SUBSCRIPTION", "Slot"]


class Slot(abc.DisposableBase):
    """Holds the current inner subscription of an operator; disposing it disposes that and runs a hook.

    The loop-bound disposable: reactivex's ``Disposable``, ``SingleAssignmentDisposable``,
    ``SerialDisposable`` and ``CompositeDisposable`` each take an ``RLock`` (an object the garbage collector
    tracks) and a few calls per operation, so that they may be disposed from any thread. rxagent's
    operators run on one thread, the event loop's (their sources are loop-bound), so a plain object does:
    ``Slot(action)`` is ``Disposable(action)`` (``dispose`` is idempotent: ``action`` runs once), and
    :attr:`current` is a serial or single-assignment holder. Dispose it on the thread its operator runs
    on; from another thread, go through the loop (``loop.call_soon_threadsafe(slot.dispose)``).

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


class _NoSubscription(abc.DisposableBase):
    __slots__ = ()

    def dispose(self) -> None:
        """Nothing to dispose."""


NO_SUBSCRIPTION: abc.DisposableBase = _NoSubscription()
"""What a subscription that holds nothing returns (``reactivex.disposable.Disposable()``, without an
``RLock`` per subscription): a source that ended inside ``subscribe``, say. One shared object."""
