"""What every config section shares: no unknown keys, and an empty sub-section means its defaults."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


class Section(BaseModel):
    """Base of the config models: no unknown keys; an empty sub-section (``http:``) means its defaults."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections_mean_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            drop = [
                k
                for k, v in data.items()
                if v is None
                and k in cls.model_fields
                and isinstance(cls.model_fields[k].annotation, type)
                and issubclass(cls.model_fields[k].annotation, BaseModel)  # type: ignore[arg-type]
            ]
            if drop:
                data = {k: v for k, v in data.items() if k not in drop}
        return data


def reject_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "expected an integer")
    return value
