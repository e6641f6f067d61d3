"""Action base class."""

from __future__ import annotations

from kaisched.framework.session import Session


class Action:
    name = ""

    def execute(self, ssn: Session) -> None:
        raise NotImplementedError
