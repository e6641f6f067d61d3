"""Action base class."""

from __future__ import annotations

from typing import ClassVar

from kaisched.framework.session import Session


class Action:
    name: ClassVar[str] = ""

    def execute(self, ssn: Session) -> None:
        raise NotImplementedError
