"""Where a group's samples come from: the Source contract (:mod:`.contract`) that every
adapter follows and the engine relies on."""
