"""``/v1/webhooks``: webhook subscriptions, as ``hcat-notify webhooks`` manages them
(docs/webhooks.md). Writers only: a webhook's URL and deliveries are the operators'."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Response

from hcat_notify.api.auth import require_writer
from hcat_notify.api.contract import MAX_PAGE
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc
from hcat_notify.api.routes.tables import WRITE_ERRORS, State
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.state import in_thread
from hcat_notify.api.webhook_models import (
    NewWebhook,
    Replay,
    Webhook,
    WebhookDetail,
    WebhookSecret,
    WebhookTopicModel,
)
from hcat_notify.model.principals import Principal

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/webhooks",
    tags=["webhooks"],
    responses={**PROBLEM_RESPONSES, 403: problem_doc("The principal is a reader.")},
    route_class=ApiRoute,
    dependencies=[Depends(require_writer)],
)
Writer = Annotated[Principal, Depends(require_writer)]
NamePath = Annotated[str, Path(description="The webhook's name.")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: problem_doc("No webhook has that name.")}
_BAD_INPUT: dict[int | str, dict[str, Any]] = {
    **WRITE_ERRORS,
    400: problem_doc("A bad name, URL, pattern or kind, or a name in use (nothing written)."),
}
_GONE: dict[int | str, dict[str, Any]] = {
    410: problem_doc(
        "The outbox's retention deleted events from fromEvent on (HistoryGoneError); the "
        "detail names the oldest event to start from."
    )
}


@router.get("")
async def list_webhooks(state: State) -> list[Webhook]:
    """Every webhook, by name: ``hcat-notify webhooks list``."""
    found = await in_thread(lambda: state.catalog().webhooks.every())
    return [Webhook.of(info) for info in found]


@router.post("", status_code=201, responses={**_BAD_INPUT, **_GONE})
async def add_webhook(body: NewWebhook, state: State) -> WebhookSecret:
    """Add a webhook: ``hcat-notify webhooks add``. The answer holds its signing secret,
    shown this once only."""

    def add() -> WebhookSecret:
        info, secret = state.catalog().webhooks.add(
            body.name,
            body.url,
            body.tables,
            events=body.events,
            format=body.format,
            from_event=body.from_event,
        )
        return WebhookSecret(webhook=Webhook.of(info), secret=secret)

    return await in_thread(add)


@router.get("/{name}", responses=_NOT_FOUND)
async def show_webhook(
    name: NamePath,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    after: Annotated[
        str | None, Query(description="The next of the previous page (a topic).")
    ] = None,
    only: Annotated[
        Literal["failing", "parked"] | None,
        Query(description="Only the topics failing (retried) or parked."),
    ] = None,
) -> WebhookDetail:
    """The webhook, its failing and parked topics counted, and a page of its delivery per
    topic by name (how far, failures, parked): ``hcat-notify webhooks show``."""

    def show() -> WebhookDetail:
        webhooks = state.catalog().webhooks
        (figures,) = webhooks.figures(name)
        info, found = webhooks.topics_page(name, after=after, limit=limit + 1, only=only)
        page = found[:limit]
        return WebhookDetail(
            webhook=Webhook.of(info),
            failing_topics=figures.failing,
            parked_topics=figures.parked,
            delivered_through=figures.delivered,
            topics=[WebhookTopicModel.of(topic) for topic in page],
            next=page[-1].topic if len(found) > limit else None,
        )

    return await in_thread(show)


@router.post("/{name}/pause", responses=_NOT_FOUND)
async def pause_webhook(name: NamePath, state: State) -> Webhook:
    """Stop delivering to it (what is in flight finishes): ``webhooks pause``."""
    return Webhook.of(await in_thread(lambda: state.catalog().webhooks.pause(name)))


@router.post("/{name}/resume", responses=_NOT_FOUND)
async def resume_webhook(name: NamePath, state: State) -> Webhook:
    """Deliver again, after a pause or a 410 that disabled it: ``webhooks resume``."""
    return Webhook.of(await in_thread(lambda: state.catalog().webhooks.resume(name)))


@router.post("/{name}/rotate-secret", responses=_NOT_FOUND)
async def rotate_secret(name: NamePath, state: State) -> WebhookSecret:
    """A new signing secret, shown this once; the previous one signs beside it for a
    while: ``webhooks rotate-secret``."""

    def rotate() -> WebhookSecret:
        info, secret = state.catalog().webhooks.rotate_secret(name)
        return WebhookSecret(webhook=Webhook.of(info), secret=secret)

    return await in_thread(rotate)


@router.post("/{name}/replay", responses={**_NOT_FOUND, **_BAD_INPUT, **_GONE})
async def replay_webhook(name: NamePath, body: Replay, state: State) -> Webhook:
    """Deliver again from an event id: ``webhooks replay --from-event``."""
    info = await in_thread(lambda: state.catalog().webhooks.replay(name, body.from_event))
    return Webhook.of(info)


@router.delete("/{name}", status_code=204, responses=_NOT_FOUND)
async def remove_webhook(name: NamePath, state: State) -> Response:
    """Forget the webhook and its progress: ``webhooks remove``."""
    await in_thread(lambda: state.catalog().webhooks.remove(name))
    return Response(status_code=204)
