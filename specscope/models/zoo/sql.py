"""`builtin:sql`: text-to-SQL prompts over invented schemas, a domain the zoo never trained on.

Online Speculative Decoding (Liu et al. 2024) adapts a draft to a *query distribution shift*:
the served queries come from a narrow domain (their examples: Spider SQL, GSM8K, code) that the
draft was not trained on. The zoo models learned the Python standard library only, so SQL is
such a domain. Each prompt is Spider-like, in the Codex few-shot text-to-SQL layout: the
schema as `#` comments, `SHOTS` solved questions on that schema (a `###` question, then its
query), and a new question with the first word of its query, `SELECT`, for the model to go on.

Schemas are invented: a domain's two related tables (an entity and the table that refers to
it by `<entity>_id`) with a seeded subset of their columns, and one table of another domain;
queries come from `TEMPLATES` (WHERE, JOIN, GROUP BY, HAVING, ORDER BY … LIMIT, NOT IN).
Prompts draw everything from `random.Random("specscope-sql:0")`, `:1`, … in order (a str seed
is hashed with SHA-512, so the set is the same on every machine), a draw that repeats an
earlier prompt skipped.

The 3.7M-parameter `tiny-code` does not write SQL: it reads `SELECT` as the start of a Python
constant and goes on with assignments and loops of repetition. That behaviour is the target's
on this query distribution, systematic across prompts and unlike the draft's, which is what OSD
adapts to. Measured with `specscope adapt` (update every request, 4 steps, lr 1e-4, chain of
4, greedy, every prompt served once): 48 prompts × 64 tokens, per-node acceptance 0.47 → 0.59
and tokens/step 1.82 → 2.23 against the never-adapted control; on 32 `builtin:code-edit`
prompts (no shift: the draft was distilled from the target on the stdlib) 0.43 → 0.42.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SHOTS = 2
"""Solved questions before the one to answer."""


@dataclass(frozen=True)
class Table:
    """A table: its name, text columns and numeric columns (its key `<name>_id` is implied)."""

    name: str
    text: tuple[str, ...]
    numbers: tuple[str, ...]


DOMAINS: tuple[tuple[Table, Table], ...] = (
    (Table("singer", ("name", "country", "genre"), ("age", "net_worth", "debut_year")),
     Table("concert", ("venue", "theme", "city"), ("year", "attendance", "ticket_price"))),
    (Table("student", ("name", "major", "city"), ("age", "gpa", "enrolled_year")),
     Table("enrollment", ("course", "semester", "instructor"), ("grade", "credits", "absences"))),
    (Table("customer", ("name", "city", "segment"), ("age", "credit_limit", "signup_year")),
     Table("orders", ("status", "channel", "region"), ("amount", "quantity", "discount"))),
    (Table("airline", ("name", "country", "alliance"), ("fleet_size", "founded", "hubs")),
     Table("flight", ("origin", "destination", "aircraft"), ("distance", "price", "seats"))),
    (Table("department", ("name", "building", "division"), ("budget", "headcount", "floor")),
     Table("employee", ("title", "city", "gender"), ("salary", "age", "hire_year"))),
    (Table("author", ("name", "nationality", "publisher"), ("birth_year", "awards", "books")),
     Table("book", ("title", "genre", "language"), ("pages", "price", "published_year"))),
    (Table("doctor", ("name", "specialty", "hospital"), ("experience", "rating", "patients")),
     Table("visit", ("diagnosis", "ward", "weekday"), ("cost", "duration", "room"))),
    (Table("team", ("name", "city", "league"), ("founded", "titles", "stadium_capacity")),
     Table("player", ("position", "nationality", "foot"), ("height", "goals", "salary"))),
)
"""Pairs (entity, the table that refers to it) of the invented schemas."""

VALUES = ("France", "Japan", "Brazil", "Kenya", "Norway", "Canada", "Paris", "Osaka", "Lima",
          "Denver", "active", "pending", "online", "retail", "senior", "Monday", "English",
          "north", "rock", "jazz", "history", "surgery", "Boeing", "Star")
"""String constants of WHERE clauses (the model has no way to tell a sensible one anyway)."""

TEMPLATES: tuple[tuple[str, str], ...] = (
    ("How many {P} rows have {pt} equal to '{v}'?",
     "SELECT COUNT(*) FROM {P} WHERE {pt} = '{v}'"),
    ("List the {pt} of every {P} whose {pn} is above {k}.",
     "SELECT {pt} FROM {P} WHERE {pn} > {k}"),
    ("What is the average {cn} of {C} for each {pt} of {P}?",
     "SELECT T1.{pt}, AVG(T2.{cn}) FROM {P} AS T1 JOIN {C} AS T2 ON T1.{P}_id = T2.{P}_id "
     "GROUP BY T1.{pt}"),
    ("Show the {pt} of the {k} {P} rows with the highest {pn}.",
     "SELECT {pt} FROM {P} ORDER BY {pn} DESC LIMIT {k}"),
    ("Which {P} has more than {k} {C} rows? Give its {pt}.",
     "SELECT T1.{pt} FROM {P} AS T1 JOIN {C} AS T2 ON T1.{P}_id = T2.{P}_id "
     "GROUP BY T1.{P}_id HAVING COUNT(*) > {k}"),
    ("Give the {ct} of each {C} whose {P} has {pt} '{v}'.",
     "SELECT T2.{ct} FROM {P} AS T1 JOIN {C} AS T2 ON T1.{P}_id = T2.{P}_id "
     "WHERE T1.{pt} = '{v}'"),
    ("Find the {pt} of the {P} rows that have no {C}.",
     "SELECT {pt} FROM {P} WHERE {P}_id NOT IN (SELECT {P}_id FROM {C})"),
    ("What are the smallest and largest {cn} of {C} with {ct} '{v}'?",
     "SELECT MIN({cn}), MAX({cn}) FROM {C} WHERE {ct} = '{v}'"),
    ("Count the {C} rows for each {ct}, most frequent first.",
     "SELECT {ct}, COUNT(*) FROM {C} GROUP BY {ct} ORDER BY COUNT(*) DESC"),
)
"""(question, query) templates; P/C: entity and referring table, pt/pn and ct/cn: a text and a
numeric column of each, v: a string constant, k: a small number."""


def _columns(rng: random.Random, table: Table, parent: str | None) -> list[str]:
    """`table`'s key, its parent's key if it has one, and two text and two numeric columns."""
    keys = [f"{table.name}_id"] + ([f"{parent}_id"] if parent else [])
    return keys + rng.sample(table.text, 2) + rng.sample(table.numbers, 2)


def _fields(rng: random.Random, parent: str, child: str, columns: dict[str, list[str]]
            ) -> dict[str, str | int]:
    """A template's placeholders, drawn for one question."""
    p_cols, c_cols = columns[parent], columns[child]
    return {"P": parent, "C": child, "pt": rng.choice(p_cols[1:3]), "pn": rng.choice(p_cols[3:]),
            "ct": rng.choice(c_cols[2:4]), "cn": rng.choice(c_cols[4:]), "v": rng.choice(VALUES),
            "k": rng.randint(2, 9)}


def sql_prompt(rng: random.Random) -> str:
    """One prompt: a schema, `SHOTS` solved questions and a question whose query starts."""
    d = rng.randrange(len(DOMAINS))
    parent, child = DOMAINS[d]
    other = DOMAINS[(d + rng.randrange(1, len(DOMAINS))) % len(DOMAINS)][rng.randrange(2)]
    columns = {parent.name: _columns(rng, parent, None),
               child.name: _columns(rng, child, parent.name),
               other.name: _columns(rng, other, None)}
    tables = list(columns)
    rng.shuffle(tables)
    schema = "\n".join(f"# {t}({', '.join(columns[t])})" for t in tables)
    chosen = rng.sample(TEMPLATES, SHOTS + 1)
    asked = [(q.format(**f), s.format(**f)) for (q, s), f in
             ((t, _fields(rng, parent.name, child.name, columns)) for t in chosen)]
    shots = "".join(f"### {q}\n{s}\n\n" for q, s in asked[:-1])
    question = asked[-1][0]
    return (f"### SQLite SQL tables, with their properties:\n#\n{schema}\n#\n{shots}"
            f"### {question}\nSELECT")


def sql_prompts(size: int) -> list[str]:
    """`size` distinct prompts drawn from seeds `specscope-sql:0`, `:1`, … in order, a draw
    that repeats an earlier prompt skipped."""
    prompts: dict[str, None] = {}
    seed = 0
    while len(prompts) < size:
        prompts.setdefault(sql_prompt(random.Random(f"specscope-sql:{seed}")))
        seed += 1
    return list(prompts)
