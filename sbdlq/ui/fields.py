"""The console's text field: an Input whose Enter acts in the order the keys were typed."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class KeyOrderInput(Input):
    """An Input that submits on Enter in key order, with the text typed before that Enter.

    Textual runs an Input's Enter binding only after the key has bubbled up to the app, while the
    letters after it go straight into the field. In a burst of typeahead (a loaded machine, a slow
    link) an Enter would then submit text typed after it: in the purge dialog, an Enter pressed
    before the entity's name confirmed with the name, and the next Enter closed the result.
    Every text field of the console is one of these.
    """

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            await self.action_submit()
            return
        await super()._on_key(event)
