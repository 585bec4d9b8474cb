"""An episode's recorded turns (gateway/records.py) as trajectory rows of the shape rollforge's
own episodes have (flows/scoring.py `episode_rows`, storage/schema.py), so a conversation any
client held with the policy becomes a row like one of the loop's own.

A client holds the conversation and re-sends it each turn. Where a turn's prompt ids begin with
an earlier turn's prompt + sampled ids (the client re-sent the history, and the chat template
renders it prefix-stable), the turn extends that row, as training/episodes.py's `EpisodeTokens`
does:

    turn 1 prompt ids | turn 1 sampled ids | the rest of turn 2's prompt | turn 2 sampled ids ...
      prompt_token_ids  mask 1, log-probs     mask 0, log-prob 0.0         mask 1, log-probs

The tokens are never re-rendered: the row holds exactly the ids that were sent and sampled.
Where a turn's prompt continues no earlier row (the template re-rendered the history
differently, the client edited it, a reply did not survive as text, or the policy version
changed between turns), it starts a row of its own: the episode *split*, and the row it did not
continue ends with `end_reason` "split" (the last row of each chain ends with "client": the
client stopped there). With n > 1 each choice is a branch: a later turn extends the branch the
client continued, the others stay rows of their own. Rows are not graded here (`reward` null,
`status` "not_graded"): whoever holds the task (an environment driving the client) scores them.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from storage.schema import TrajectoryRow
from training.episodes import EpisodeTokens


@dataclass
class _Chain:
    """One row being built: its tokens and what each turn added."""

    tokens: EpisodeTokens
    version: int
    first_turn: int
    texts: list[str] = field(default_factory=list)  # the completion's text, piece by piece
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # the prompt text each later turn added
    seconds: list[float] = field(default_factory=list)
    end_reason: str = "client"
    last_turn: int = -1

    def full(self) -> list[int]:
        return self.tokens.context()


def _prefix(a: list[int], b: list[int]) -> bool:
    return len(a) <= len(b) and b[:len(a)] == a


def _continued(chains: list[_Chain], prompt: list[int], version: int) -> _Chain | None:
    """The chain whose whole sequence the prompt begins with (the longest one), same version."""
    best = None
    for ch in chains:
        if ch.version == version and _prefix(ch.full(), prompt):
            if best is None or len(ch.full()) > len(best.full()):
                best = ch
    return best


def build_chains(turns: list[dict], tok) -> list[_Chain]:
    """The rows' token sequences from the turn records, in turn order (see the docstring)."""
    chains: list[_Chain] = []
    previous = None  # the turn before this one
    for rec in sorted(turns, key=lambda r: r["turn"]):
        before = [(ch, copy.deepcopy(ch)) for ch in chains]  # what this turn's choices continue
        used: set[int] = set()
        per_choice = float(rec.get("seconds", 0.0)) / max(1, len(rec["choices"]))
        for c in rec["choices"]:
            prompt = [int(t) for t in rec["prompts"][c["prompt_index"]]]
            snap = _continued([s for _, s in before], prompt, rec["policy_version"])
            if snap is None:
                for ch in chains:  # the row(s) the turn before left, which this one does not continue
                    if ch.last_turn == previous and ch.end_reason == "client":
                        ch.end_reason = "split"
                ch = _Chain(EpisodeTokens(prompt), rec["policy_version"], rec["turn"])
                chains.append(ch)
            else:
                live = next(ch for ch, s in before if s is snap)
                if id(live) in used:  # a second choice of this turn: a branch of its own
                    ch = copy.deepcopy(snap)
                    chains.append(ch)
                else:
                    ch = live
                used.add(id(ch))
                gap = prompt[len(snap.full()):]
                ch.tokens.add_env(gap)
                ch.observations.append(tok.decode(gap))
                ch.texts.append(tok.decode(gap))
                ch.end_reason = "client"
            ch.tokens.add_policy([int(t) for t in c["token_ids"]], [float(x) for x in c["logprobs"]])
            ch.texts.append(c.get("text", ""))
            ch.actions.append(c.get("text", ""))
            ch.seconds.append(per_choice)
            ch.last_turn = rec["turn"]
        previous = rec["turn"]
    return chains


def episode_rows(turns: list[dict], tok, run_id: str, iteration: int = 0,
                 config_hash: str | None = None) -> list[TrajectoryRow]:
    """Trajectory rows of one episode's turn records, ungraded (gateway/play.py
    `graded_columns` fills what the kind's grade says); `tok` is the policy's tokenizer
    (flows/sampler.py `policy_tokenizer`), for the rows' text only."""
    if not turns:
        return []
    episode = turns[0]["episode_id"]
    rows = []
    for i, ch in enumerate(build_chains(turns, tok)):
        multi = len(ch.actions) > 1
        rows.append(TrajectoryRow(
            run_id=run_id, iteration=iteration, policy_version=ch.version,
            task_id=f"gateway:{episode}", suite="gateway", family="gateway",
            difficulty=0, split="train", source="gateway", kind="gateway",
            sample_index=i, group_id=f"gateway:{episode}",
            prompt=tok.decode(ch.tokens.prompt_ids), completion="".join(ch.texts),
            prompt_token_ids=ch.tokens.prompt_ids, completion_token_ids=ch.tokens.ids,
            sampling_logprobs=ch.tokens.logprobs,
            completion_mask=ch.tokens.mask if multi else None,
            reward=None, reward_components={}, advantage=None, pass_fraction=None,
            tests_passed=None, tests_total=None, test_outcomes=[], test_names=[],
            status="not_graded", error_type=None, hack_flags=[], infra_error=False,
            solved=None, sandbox_backend=None, image_digest=None,
            gen_time_s=float(sum(ch.seconds)), exec_time_s=None, score_time_s=None,
            config_hash=config_hash, episode_id=episode, turns=len(ch.actions),
            end_reason=ch.end_reason,
            turn_seconds=ch.seconds if multi else None,
            turn_actions=ch.actions if multi else None,
            turn_observations=ch.observations if multi else None,
            shaping_reward=None, answer_executed=None, tool_calls=None,
            turn_progress=None, turn_advantages=None,
        ))
    return rows
