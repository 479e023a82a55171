"""The demo's students (common.inputs.demo): histories simulated over the item bank
(common.inputs.demo_items), as train.csv's rows and the true probability of a correct answer
on every question row.

Parameter names are `DemoConfig` fields; the `config` arguments are a DemoConfig
(common.inputs.demo, which imports this module, so the type is not named here).

Students. Student u has an ability theta_u ~ N(0, `ability_sd`), an answer speed
~ LogNormal(0, `speed_sigma`), a probability of reading the explanation after a container
~ Beta(`explanation_beta`) (some students nearly always read, some nearly never), and a rate
of taking lectures = `lecture_rate` * Gamma(shape 1/2, scale 2), at most 1/2 (most students
rarely take one). user_ids are unique random integers in 1..2^31-1.

Knowledge. k_{u,s} is student u's knowledge of skill s in logit units; it starts at 0 and
is bounded by `knowledge_max`. Between updates it fades towards 0,
k(t) = k(t0) * exp(-(t - t0) / tau) with tau = `forgetting_days`. After a question container
every answered question q moves each of its skills towards the bound,
k <- k + eta * (`knowledge_max` - k), eta = `learn_practice` (+ `learn_explanation` when the
student read the explanation); several questions on one skill in a container compound,
k <- k_max - (k_max - k) * prod(1 - eta). A lecture on skill s does the same with
eta = `learn_lecture`.

Answers. All questions of a container are answered with the knowledge from before the
container (feedback comes after it):
    z = clip(a_q * (theta_u + mean_{s in tags(q)} k_{u,s} - b_q), -`logit_clip`, `logit_clip`)
    p = 1/4 + 3/4 * sigmoid(z)       (four choices: a guessing floor of 1/4)
p is rounded to 6 decimals and is exactly the p_true written to demo_truth.csv;
answered_correctly ~ Bernoulli(p); user_answer is the correct answer when correct, else one
of the three wrong choices uniformly.

Time. A question takes base seconds of its part (`answer_seconds`) * the student's speed
* exp(-`answer_slowdown` * z) * LogNormal(0, `answer_noise_sigma`), in whole seconds, at most
`max_answer_seconds`: a student who is less likely to know the answer is slower, so elapsed
time carries signal.
A container's prior_question_elapsed_time, shown on the next question container, is its
mean milliseconds per question (integer ms). Between events a student idles
LogNormal(ln `idle_seconds`, `idle_sigma`), takes a short pause (1-30 min, log-uniform) with
probability `pause_prob` or a long break (1 hour to `max_break_days`, log-uniform, during
which knowledge fades) with probability `break_prob`, reads the explanation if it does
(LogNormal(ln `read_seconds`, 0.6)) and watches a lecture (LogNormal(ln `lecture_seconds`,
0.8)). A timestamp is the completion time of its event in ms since the student's first
event completed (first event at 0).

Histories. A student's number of events (question containers and lectures) is
LogNormal(ln `median_events`, `events_sigma`), at least 1 and at most `max_events`, which
gives heavy-tailed histories as in the real data (median near 40 rows, some thousands).
The first event is a question container; each later event is a lecture with the student's
lecture rate, else a question container. A lecture is on a random lecture of the part of the
student's latest question; it has its own timestamp and task_container_id, user_answer and
answered_correctly -1, an empty prior_question_elapsed_time and prior_question_had_explanation
False (as in the real data); it does not change what the next question container reports about
the previous question container.

Simulation. All students advance together, one event per step, with numpy operations over
the students still active (students are simulated longest history first, so the active ones
are a prefix of the state arrays); the rows are then ordered by user_id and time and numbered
0..N-1 like the real train.csv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.data.schema import LECTURE, N_CHOICES, QUESTION, TRAIN_COLUMNS
from common.inputs.demo_items import ItemBank

MS_PER_DAY = 86_400_000


@dataclass
class _Students:
    """Per-student parameters and state, in simulation order (longest history first)."""

    n_events: np.ndarray  # (U,) descending
    ability: np.ndarray  # (U,)
    speed: np.ndarray  # (U,)
    read_prob: np.ndarray  # (U,)
    lecture_prob: np.ndarray  # (U,)
    knowledge: np.ndarray  # (U, n_tags + 1) float32; column n_tags pads, stays 0
    updated_at: np.ndarray  # (U, n_tags + 1) int64 ms of the latest knowledge update
    clock: np.ndarray  # (U,) int64 ms at the end of the latest event (reading included)
    last_mean_ms: np.ndarray  # (U,) int32 of the latest question container, -1 before
    last_read: np.ndarray  # (U,) int8 read its explanation, -1 before
    last_part: np.ndarray  # (U,) int8 part of the latest question container


def _draw_students(config, rng: np.random.Generator) -> _Students:
    n = config.n_users
    n_events = rng.lognormal(math.log(config.median_events), config.events_sigma, n)
    n_events = np.clip(np.rint(n_events), 1, config.max_events).astype(np.int64)
    width = config.n_tags + 1
    return _Students(
        n_events=np.sort(n_events)[::-1].copy(),
        ability=rng.normal(0.0, config.ability_sd, n),
        speed=rng.lognormal(0.0, config.speed_sigma, n),
        read_prob=rng.beta(*config.explanation_beta, n),
        lecture_prob=np.minimum(config.lecture_rate * rng.gamma(0.5, 2.0, n), 0.5),
        knowledge=np.zeros((n, width), dtype=np.float32),
        updated_at=np.zeros((n, width), dtype=np.int64),
        clock=np.zeros(n, dtype=np.int64),
        last_mean_ms=np.full(n, -1, dtype=np.int32),
        last_read=np.full(n, -1, dtype=np.int8),
        last_part=np.ones(n, dtype=np.int8),
    )


# Columns of the rows the simulation emits: a simulation user index instead of user_id,
# -1 where a prior value is missing.
_ROW_DTYPES: dict[str, type] = {
    "user": np.int32,
    "timestamp": np.int64,
    "content_id": np.int16,
    "content_type_id": np.int8,
    "task_container_id": np.int16,
    "user_answer": np.int8,
    "answered_correctly": np.int8,
    "prior_mean_ms": np.int32,
    "prior_read": np.int8,
    "p_true": np.float64,
}


def _log_uniform(low: float, high: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.exp(rng.uniform(math.log(low), math.log(high), n))


class _Simulation:
    """Advances all students one event per step and collects the emitted rows."""

    def __init__(self, bank: ItemBank, config, rng: np.random.Generator) -> None:
        self.bank, self.config, self.rng = bank, config, rng
        self.students = _draw_students(config, rng)
        self.tau_ms = config.forgetting_days * MS_PER_DAY
        self.lecture_ids = bank.lectures["lecture_id"].to_numpy()
        self.lecture_tags = bank.lectures["tag"].to_numpy()
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in _ROW_DTYPES}

    def run(self) -> dict[str, np.ndarray]:
        """Simulate every history; return the rows in emission order (step by step)."""
        n_events = self.students.n_events  # descending: the active students are a prefix
        n_active = np.searchsorted(-n_events, -np.arange(n_events[0]), side="left")
        for step, m in enumerate(n_active.tolist()):
            users = np.arange(m)
            start = self.students.clock[:m] + self._gap_ms(m)
            lecture = (self.rng.random(m) < self.students.lecture_prob[:m]) & (step > 0)
            if not lecture.all():
                self._answer_containers(users[~lecture], start[~lecture], step)
            if lecture.any():
                self._take_lectures(users[lecture], start[lecture], step)
        return {
            name: np.concatenate(parts) if parts else np.empty(0, _ROW_DTYPES[name])
            for name, parts in self.parts.items()
        }

    def _emit(self, n: int, **columns: np.ndarray | float) -> None:
        assert columns.keys() == _ROW_DTYPES.keys(), f"columns {sorted(columns)}"
        for name, values in columns.items():
            dtype = _ROW_DTYPES[name]
            if np.ndim(values) == 0:
                self.parts[name].append(np.full(n, values, dtype=dtype))
            else:
                assert len(values) == n, f"{name}: {len(values)} values for {n} rows"
                self.parts[name].append(np.asarray(values, dtype=dtype))

    def _gap_ms(self, n: int) -> np.ndarray:
        """Time between the end of a student's event and the start of the next: idling,
        now and then a pause (minutes) or a long break (hours to weeks)."""
        config, rng = self.config, self.rng
        idle = rng.lognormal(math.log(config.idle_seconds), config.idle_sigma, n)
        pause = _log_uniform(60.0, 1800.0, n, rng)
        long_break = _log_uniform(3600.0, config.max_break_days * 86_400.0, n, rng)
        which = rng.random(n)
        extra = np.where(which < config.pause_prob, pause, 0.0)
        extra = np.where(which > 1.0 - config.break_prob, long_break, extra)
        return np.maximum(np.rint((idle + extra) * 1000.0), 1).astype(np.int64)

    def _p_correct(
        self, users: np.ndarray, questions: np.ndarray, start: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's logit and p_true for each student's bundle, from the knowledge
        faded to the container's start. Shapes (n, MAX_BUNDLE)."""
        bank, students = self.bank, self.students
        tags = bank.question_tags[questions]  # (n, MAX_BUNDLE, MAX_TAGS)
        u3 = users[:, None, None]
        fade = np.exp(-(start[:, None, None] - students.updated_at[u3, tags]) / self.tau_ms)
        knowledge = (students.knowledge[u3, tags] * fade).sum(axis=2)
        knowledge /= bank.n_question_tags[questions]  # mean over the question's skills
        logit = bank.discrimination[questions] * (
            students.ability[users, None] + knowledge - bank.difficulty[questions]
        )
        logit = np.clip(logit, -self.config.logit_clip, self.config.logit_clip)
        guess = 1.0 / N_CHOICES
        return logit, np.round(guess + (1.0 - guess) / (1.0 + np.exp(-logit)), 6)

    def _answer_ms(self, users: np.ndarray, questions: np.ndarray, logit: np.ndarray) -> np.ndarray:
        """Whole seconds per question, in ms; slower where the answer is less likely
        known. Shape (n, MAX_BUNDLE), 0 on padding."""
        seconds = (
            self.bank.base_seconds[questions]
            * self.students.speed[users, None]
            * np.exp(-self.config.answer_slowdown * logit)
            * self.rng.lognormal(0.0, self.config.answer_noise_sigma, questions.shape)
        )
        seconds = np.minimum(np.rint(seconds), self.config.max_answer_seconds)
        return (seconds * 1000.0).astype(np.int64) * (questions < self.bank.n_questions)

    def _answer_containers(self, users: np.ndarray, start: np.ndarray, step: int) -> None:
        """One question container for each of `users`, all of its questions answered with
        the knowledge from before it; then feedback: the explanation and learning."""
        bank, students, config, rng = self.bank, self.students, self.config, self.rng
        n = len(users)
        bundle = np.searchsorted(bank.bundle_cumweight, rng.random(n), side="right")
        questions = bank.bundle_questions[np.minimum(bundle, len(bank.bundle_cumweight) - 1)]
        valid = questions < bank.n_questions  # (n, MAX_BUNDLE)
        logit, p_true = self._p_correct(users, questions, start)
        correct = rng.random(questions.shape) < p_true
        key = bank.correct_answer[questions]
        wrong = (key + rng.integers(1, N_CHOICES, questions.shape)) % N_CHOICES
        total_ms = self._answer_ms(users, questions, logit).sum(axis=1)
        timestamp = start + total_ms
        read = rng.random(n) < students.read_prob[users]
        read_ms = np.rint(rng.lognormal(math.log(config.read_seconds), 0.6, n) * 1000.0)

        row = np.broadcast_to(np.arange(n)[:, None], questions.shape)[valid]
        self._emit(
            len(row),
            user=users[row],
            timestamp=timestamp[row],
            content_id=questions[valid],
            content_type_id=QUESTION,
            task_container_id=step,
            user_answer=np.where(correct, key, wrong)[valid],
            answered_correctly=correct[valid],
            prior_mean_ms=students.last_mean_ms[users][row],
            prior_read=students.last_read[users][row],
            p_true=p_true[valid],
        )
        students.last_mean_ms[users] = total_ms // valid.sum(axis=1)
        students.last_read[users] = read
        students.last_part[users] = bank.part[questions[:, 0]]
        students.clock[users] = timestamp + np.where(read, read_ms, 0).astype(np.int64)

        tags = bank.question_tags[questions]  # padding questions have only padding tags
        has_tag = tags < config.n_tags
        eta = config.learn_practice + config.learn_explanation * read  # (n,)
        pair = np.broadcast_to(np.arange(n)[:, None, None], tags.shape)[has_tag]
        self._learn(users[pair], tags[has_tag], eta[pair], timestamp[pair])

    def _take_lectures(self, users: np.ndarray, start: np.ndarray, step: int) -> None:
        """One lecture for each of `users`, from the part of the student's latest
        question container."""
        bank, config, rng = self.bank, self.config, self.rng
        n = len(users)
        part = self.students.last_part[users].astype(np.int64)
        first = bank.lecture_part_start[part - 1]
        count = bank.lecture_part_start[part] - first
        lecture = bank.lectures_by_part[first + (rng.random(n) * count).astype(np.int64)]
        watch_ms = np.rint(rng.lognormal(math.log(config.lecture_seconds), 0.8, n) * 1000.0)
        timestamp = start + watch_ms.astype(np.int64)
        self._emit(
            n,
            user=users,
            timestamp=timestamp,
            content_id=self.lecture_ids[lecture],
            content_type_id=LECTURE,
            task_container_id=step,
            user_answer=-1,
            answered_correctly=-1,
            prior_mean_ms=-1,
            prior_read=0,  # the real data has False, not empty, on lecture rows
            p_true=np.nan,
        )
        self.students.clock[users] = timestamp
        eta = np.full(n, config.learn_lecture)
        self._learn(users, self.lecture_tags[lecture], eta, timestamp)

    def _learn(self, users: np.ndarray, tags: np.ndarray, eta: np.ndarray, now: np.ndarray) -> None:
        """Fade each (user, tag) pair's knowledge to `now`, then move it towards the bound:
        k <- k_max - (k_max - k) * prod(1 - eta) over the pair's occurrences."""
        students, k_max = self.students, self.config.knowledge_max
        flat = users.astype(np.int64) * students.knowledge.shape[1] + tags
        pairs, inverse = np.unique(flat, return_inverse=True)
        inverse = inverse.reshape(-1)  # numpy 2.0 kept the input's shape here
        log_keep = np.bincount(inverse, weights=np.log1p(-eta), minlength=len(pairs))
        pair_now = np.empty(len(pairs), dtype=np.int64)
        pair_now[inverse] = now  # one student's pairs share one time
        knowledge = students.knowledge.reshape(-1)  # views: writes go to the state
        updated_at = students.updated_at.reshape(-1)
        faded = knowledge[pairs] * np.exp(-(pair_now - updated_at[pairs]) / self.tau_ms)
        knowledge[pairs] = k_max - (k_max - faded) * np.exp(log_keep)
        updated_at[pairs] = pair_now


def simulate_students(
    bank: ItemBank, config, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Simulate `config.n_users` histories; return train.csv's columns in file order
    (prior_question_elapsed_time NaN and prior_question_had_explanation -1 where missing)
    and p_true of the question rows in file order."""
    simulation = _Simulation(bank, config, rng)
    return _to_file_order(simulation.run(), config.n_users, rng)


def _draw_user_ids(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unique positive int32 ids spread over the whole range, like the real user_ids."""
    return (rng.choice(np.iinfo(np.int32).max, size=n, replace=False) + 1).astype(np.int32)


def _to_file_order(
    rows: dict[str, np.ndarray], n_users: int, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Order rows by user_id then time (rows were emitted step by step, so a stable sort
    by user keeps each history in time order), shift each history to start at 0 and
    number the rows."""
    user_ids = _draw_user_ids(n_users, rng)
    rank = np.argsort(np.argsort(user_ids, kind="stable"), kind="stable")
    order = np.argsort(rank[rows["user"]], kind="stable")
    ordered = {name: values[order] for name, values in rows.items()}
    del rows

    user = ordered.pop("user")
    first_row = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    first_timestamp = ordered["timestamp"][first_row]
    ordered["timestamp"] -= np.repeat(first_timestamp, np.diff(np.r_[first_row, len(user)]))
    prior_mean_ms = ordered.pop("prior_mean_ms")
    p_true = ordered.pop("p_true")
    train = {
        "row_id": np.arange(len(user), dtype=np.int64),
        "timestamp": ordered["timestamp"],
        "user_id": user_ids[user],
        "content_id": ordered["content_id"],
        "content_type_id": ordered["content_type_id"],
        "task_container_id": ordered["task_container_id"],
        "user_answer": ordered["user_answer"],
        "answered_correctly": ordered["answered_correctly"],
        "prior_question_elapsed_time": np.where(prior_mean_ms < 0, np.nan, prior_mean_ms),
        "prior_question_had_explanation": ordered["prior_read"],
    }
    assert list(train) == TRAIN_COLUMNS, f"columns {list(train)}"
    return train, p_true[ordered["content_type_id"] == QUESTION]
