"""The request types live in the bottom layer and are still reachable where they were."""

from __future__ import annotations

import rxagent
import rxagent.model
import rxagent.model.types
import rxagent.requests


def test_the_model_layer_and_the_facade_re_export_the_request_types() -> None:
    for name in rxagent.requests.__all__:
        moved = getattr(rxagent.requests, name)
        assert getattr(rxagent.model, name) is moved, name
        assert getattr(rxagent.model.types, name) is moved, name
        assert name in rxagent.model.__all__
    assert rxagent.ChatRequest is rxagent.requests.ChatRequest
    assert rxagent.ToolSchema is rxagent.requests.ToolSchema
