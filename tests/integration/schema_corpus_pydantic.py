"""pydantic v2 models for the schema corpus (tests/integration/schema_corpus.sh).

  schema_corpus_pydantic.py schemas          → {name: model_json_schema()} on stdout
  schema_corpus_pydantic.py validate FILE    → FILE is [{"name", "content"}]; prints
                                               "<name> ok" or "<name> bad <error>" per entry

The schemas are pydantic's own output; the generated documents are checked
by pydantic's own validator (model_validate_json, strict types where the
field says so). Needs pydantic 2 (the script exits 3 without it, and the
corpus skips this part).
"""
import datetime
import enum
import ipaddress
import json
import sys
import uuid
from typing import Annotated, Dict, List, Literal, Optional, Tuple, Union

try:
    from pydantic import AnyUrl, BaseModel, ConfigDict, Field
except ImportError:
    sys.exit(3)


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class Address(BaseModel):
    street: str = Field(max_length=12, description="street and number")
    zip: Annotated[str, Field(pattern=r"^\d{5}$")]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Scalars(BaseModel):
    age: int = Field(ge=0, le=130)
    count: int = Field(gt=0)
    ratio: float = Field(ge=0, le=1)
    score: float = Field(gt=0, lt=10)
    step: int = Field(multiple_of=5)
    name: str = Field(min_length=1, max_length=20)
    code: str = Field(pattern=r"^[A-Z]{3}$")
    flag: bool
    color: Color
    level: Literal["low", "high"]


class Formats(BaseModel):
    id: uuid.UUID
    when: datetime.datetime
    day: datetime.date
    at: datetime.time
    span: datetime.timedelta
    ip: ipaddress.IPv4Address
    ip6: ipaddress.IPv6Address
    home: Optional[AnyUrl] = None


class Containers(BaseModel):
    tags: List[str] = Field(max_length=3)
    scores: Dict[str, int]
    pair: Tuple[int, str]
    maybe: Optional[int] = None
    addresses: List[Address] = Field(min_length=1, max_length=2)


class Tagged(BaseModel):
    pet: Union[Cat, Dog] = Field(discriminator="kind")
    either: Union[int, str]


class Node(BaseModel):
    value: int
    children: List["Node"] = Field(max_length=2)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: str = Field(max_length=5)
    b: Optional[float] = None


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int


MODELS = {m.__name__: m for m in (Scalars, Formats, Containers, Tagged, Node, Strict, Extra)}


def main():
    if sys.argv[1:] == ["schemas"]:
        print(json.dumps({name: m.model_json_schema() for name, m in MODELS.items()}))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "validate":
        with open(sys.argv[2]) as f:
            for entry in json.load(f):
                try:
                    MODELS[entry["name"]].model_validate_json(entry["content"])
                    print(entry["name"], "ok")
                except Exception as e:  # a validation error names the field
                    print(entry["name"], "bad", str(e).replace("\n", " ")[:300])
        return
    sys.exit("usage: schema_corpus_pydantic.py schemas | validate FILE")


main()
