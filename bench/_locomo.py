"""The LoCoMo dev set as the benchmarks read it: conversations, sessions, turns and questions.

One loader for every benchmark that scores retrieval on ``/work/shared/data/locomo-dev.json``, so
they all score the same questions against the same evidence (docs/retrieval-research.md,
"Protocol"): per conversation the corpus is every turn of that conversation, the query is each
question and the relevant items are its evidence dia ids, cleaned up like this:

* a question with an empty evidence list is skipped;
* packed ids are split on ``;``, ``,`` or whitespace (``"D8:6; D9:17"`` -> ``D8:6``, ``D9:17``);
* ids are repaired where the intent is clear (``D:11:26`` -> ``D11:26``, ``D30:05`` -> ``D30:5``);
* ids that cannot be parsed or name no turn of that conversation (``D``, ``D10:19`` in conv-42)
  are dropped, and a question left without any valid evidence is skipped.

Every benchmark prints ``EvidenceReport.lines()`` so its output says what was done.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# shared/ lies beside the repository: /work/main/bench/_locomo.py -> /work/shared/data/...
_DATA_CANDIDATES = [
    Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json",
    Path("/work/shared/data/locomo-dev.json"),
]
DEFAULT_DATA = next((p for p in _DATA_CANDIDATES if p.is_file()), _DATA_CANDIDATES[0])

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

# Session dates are written "1:56 pm on 8 May, 2023" throughout the file.
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True)
class Turn:
    index: int  # position in the conversation, over all sessions
    dia_id: str
    session: int
    speaker: str
    text: str
    date: str  # the session's date as written in the file
    caption: str  # the image caption without its "a photo of" prefix; "" when no image

    def line(self, *, caption: bool = True) -> str:
        """``speaker: text`` with `` [shares a photo of ...]`` when the turn has an image."""
        return f"{self.speaker}: {self.with_caption() if caption else self.text}"

    def with_caption(self) -> str:
        """The turn's text, plus `` [shares a photo of ...]`` when it has an image."""
        if not self.caption:
            return self.text
        return f"{self.text} [shares a photo of {self.caption}]"


@dataclass
class Session:
    number: int
    date: str  # as written in the file
    when: datetime | None  # the same, parsed (UTC); None when the file has no or an odd date
    turns: list[Turn] = field(default_factory=list)


@dataclass
class Question:
    conv: str
    text: str
    category: int
    evidence: list[str]
    answer: str = ""


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session]
    turns: list[Turn]
    summaries: dict[int, str]  # session number -> LoCoMo's LLM-written session summary
    questions: list[Question] = field(default_factory=list)


@dataclass
class EvidenceReport:
    """What was done to malformed evidence lists (the data README asks for this)."""

    empty: int = 0
    split: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    no_valid_evidence: int = 0

    def lines(self) -> list[str]:
        return [
            f"questions with an empty evidence list, skipped: {self.empty}",
            f"packed ids split on ';' ',' or spaces: {self.split or 'none'}",
            f"ids repaired (D:11:26 -> D11:26, D30:05 -> D30:5): {self.repaired or 'none'}",
            f"ids dropped (unparseable or no such turn): {self.dropped or 'none'}",
            f"questions left without valid evidence, skipped: {self.no_valid_evidence}",
        ]


_ID_RE = re.compile(r"^D:?(\d+):0*(\d+)$")
_CAPTION_PREFIX_RE = re.compile(r"^a (photo|photography|picture|image) of\s+")


def normalise_id(raw: str) -> str | None:
    m = _ID_RE.match(raw.strip())
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else None


def clean_caption(caption: str) -> str:
    return _CAPTION_PREFIX_RE.sub("", caption.strip())


def parse_session_date(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), SESSION_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def load_locomo(path: Path = DEFAULT_DATA) -> tuple[list[Conversation], EvidenceReport]:
    data = json.loads(path.read_text())
    report = EvidenceReport()
    convs: list[Conversation] = []
    for item in data:
        c = item["conversation"]
        numbers = sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k))
        sessions: list[Session] = []
        turns: list[Turn] = []
        for n in numbers:
            date = c.get(f"session_{n}_date_time", "")
            session = Session(n, date, parse_session_date(date))
            for t in c[f"session_{n}"]:
                turn = Turn(
                    index=len(turns),
                    dia_id=t["dia_id"],
                    session=n,
                    speaker=t["speaker"],
                    text=t["text"],
                    date=date,
                    caption=clean_caption(t.get("blip_caption", "")),
                )
                session.turns.append(turn)
                turns.append(turn)
            sessions.append(session)
        summaries = {
            int(k.split("_")[1]): v for k, v in (item.get("session_summary") or {}).items()
        }
        conv = Conversation(
            item["sample_id"], (c["speaker_a"], c["speaker_b"]), sessions, turns, summaries
        )
        ids = {t.dia_id for t in turns}
        for q in item["qa"]:
            evidence = _evidence(conv.sample_id, list(q.get("evidence") or []), ids, report)
            if evidence is None:
                continue
            answer = q.get("answer", q.get("adversarial_answer", ""))
            conv.questions.append(
                Question(conv.sample_id, q["question"], int(q["category"]), evidence, str(answer))
            )
        convs.append(conv)
    return convs, report


def _evidence(
    conv: str, raw_list: list[str], ids: set[str], report: EvidenceReport
) -> list[str] | None:
    """The question's valid evidence ids in order, or None when the question is to be skipped."""
    if not raw_list:
        report.empty += 1
        return None
    evidence: list[str] = []
    for raw in raw_list:
        parts = [p for p in re.split(r"[;,\s]+", raw) if p]
        if len(parts) > 1:
            report.split.append(f"{conv}:{raw!r}")
        for part in parts:
            norm = normalise_id(part)
            if norm is not None and norm != part:
                report.repaired.append(f"{conv}:{part!r}->{norm}")
            if norm is None or norm not in ids:
                report.dropped.append(f"{conv}:{part!r}")
                continue
            if norm not in evidence:
                evidence.append(norm)
    if not evidence:
        report.no_valid_evidence += 1
        return None
    return evidence


def limit_questions(convs: list[Conversation], n: int | None) -> None:
    """Keep about n questions overall, the first ones of each conversation in equal shares."""
    if not n:
        return
    per = max(1, n // len(convs))
    for c in convs:
        c.questions = c.questions[:per]


METRICS = ("r1", "r5", "r10", "mrr", "ndcg10")


def ranking_metrics(ranked: list[str | None], evidence: list[str]) -> dict[str, float]:
    """R@1/5/10 (share of the evidence ids in the top k), MRR (1 / rank of the first evidence
    turn, 0 when none is returned) and nDCG@10 with binary gains, for one question.

    ``ranked`` is what the retriever returned, best first; None marks a result that is no turn of
    the conversation (another source), which takes its place in the ranking all the same.
    """
    position: dict[str, int] = {}
    for rank, dia_id in enumerate(ranked):
        if dia_id is not None and dia_id not in position:
            position[dia_id] = rank
    ranks = [position.get(e, 10**9) for e in evidence]
    best = min(ranks)
    dcg = sum(1.0 / math.log2(r + 2) for r in ranks if r < 10)
    idcg = sum(1.0 / math.log2(r + 2) for r in range(min(len(evidence), 10)))
    return {
        "r1": sum(r < 1 for r in ranks) / len(evidence),
        "r5": sum(r < 5 for r in ranks) / len(evidence),
        "r10": sum(r < 10 for r in ranks) / len(evidence),
        "mrr": 1.0 / (best + 1) if best < 10**9 else 0.0,
        "ndcg10": dcg / idcg,
    }


@dataclass
class MetricSums:
    """Running means of ``ranking_metrics`` over questions."""

    n: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(METRICS, 0.0))

    def add(self, values: dict[str, float]) -> None:
        self.n += 1
        for key, value in values.items():
            self.sums[key] += value

    def mean(self, key: str) -> float:
        return self.sums[key] / max(self.n, 1)


def memory_drafts(conv: Conversation, *, speaker: bool = True) -> list[dict[str, Any]]:
    """The conversation's turns as the memory API takes them: content = the turn's text (plus
    its image caption), session_id = the session, occurred_at = the session's date and time,
    metadata = {"speaker", "dia_id"}; without ``speaker`` the metadata holds only the dia id
    (content only, as many clients store memories; the dia id is for scoring)."""
    drafts = []
    for session in conv.sessions:
        for turn in session.turns:
            metadata = {"speaker": turn.speaker, "dia_id": turn.dia_id}
            if not speaker:
                del metadata["speaker"]
            draft: dict[str, Any] = {
                "content": turn.with_caption(),
                "session_id": f"session_{session.number}",
                "metadata": metadata,
            }
            if session.when is not None:
                draft["occurred_at"] = session.when.isoformat()
            drafts.append(draft)
    return drafts
