"""The gateway's episodes made into rows (gateway/rows.py) and kept in its records
(gateway/records.py), through a served tiny policy and the real `openai` client: a multi-turn
conversation becomes one masked row when the client re-sends a prefix-stable history, and splits
(saying so) when it does not or when another policy version sampled a turn; each branch of `n`
is kept; concurrent requests of one episode, and two gateways on one folder, each get a whole
turn of their own."""
import threading

from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from storage.schema import rows_to_table

# served, served_chat: fixtures, imported so that the tests can request them by name
from gateway_common import connect, served, served_chat  # noqa: F401


def _chat_turn(client, history):
    resp = client.chat.completions.create(model="gwchat", messages=history, temperature=0,
                                          max_tokens=6, logprobs=True)
    return resp, resp.choices[0].message.content


def test_a_prefix_stable_chat_conversation_becomes_one_masked_row(served_chat):
    srv, gw = served_chat
    client = connect(srv, episode="chat-1")
    history = [{"role": "user", "content": "hi"}]
    replies = []
    for follow_up in ("go on", "and?"):
        resp, text = _chat_turn(client, history)
        replies.append(resp.choices[0])
        # the client re-sends the reply as text: it must survive the trip for the row to join
        assert gw.tok.encode(text, bos=False) == [t for t in resp.choices[0].model_extra[
            "token_ids"] if t != gw.tok.eos_token_id], "the greedy reply is not plain text"
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]
    resp, _ = _chat_turn(client, history)
    replies.append(resp.choices[0])
    turns = gw.records.turns("chat-1")
    row, = episode_rows(turns, gw.tok, "gwchat")
    first = turns[0]["prompts"][0]
    assert row.prompt_token_ids == first and row.turns == 3 and row.end_reason == "client"
    # prompt + completion is the last turn's prompt + its reply, exactly as sent and sampled
    assert first + row.completion_token_ids == turns[2]["prompts"][0] + turns[2]["choices"][0][
        "token_ids"]
    want_mask, want_lp = [], []
    for k, t in enumerate(turns):
        if k:  # what the client's re-sent history added: context, not trained on
            gap = len(t["prompts"][0]) - len(first) - len(want_mask)
            want_mask += [0] * gap
            want_lp += [0.0] * gap
        want_mask += [1] * len(t["choices"][0]["token_ids"])
        want_lp += t["choices"][0]["logprobs"]
    assert row.completion_mask == want_mask and row.sampling_logprobs == want_lp
    assert want_lp[-len(replies[-1].logprobs.content):] == [
        x.logprob for x in replies[-1].logprobs.content]
    assert rows_to_table([row], 0, 0).num_rows == 1


def test_an_edited_history_splits_the_episode_and_says_so(served_chat):
    srv, gw = served_chat
    client = connect(srv, episode="chat-split")
    history = [{"role": "user", "content": "hi"}]
    _, text = _chat_turn(client, history)
    # the client rewrote the reply: turn 2's prompt no longer begins with turn 1's ids
    history += [{"role": "assistant", "content": "(edited) " + text},
                {"role": "user", "content": "go on"}]
    _chat_turn(client, history)
    turns = gw.records.turns("chat-split")
    rows = episode_rows(turns, gw.tok, "gwchat")
    assert [r.end_reason for r in rows] == ["split", "client"]
    assert [r.prompt_token_ids for r in rows] == [t["prompts"][0] for t in turns]
    assert [r.turns for r in rows] == [1, 1] and rows[1].completion_mask is None


def test_a_token_id_conversation_keeps_each_branch_of_n(served):
    srv, gw = served
    client = connect(srv, episode="ids-multi")
    p1 = gw.tok.encode("a = 1\n")
    r1 = client.completions.create(model="gw", prompt=p1, n=2, max_tokens=5, seed=1)
    s1 = r1.choices[1].model_extra["token_ids"]
    obs = gw.tok.encode("\n# ok\n", bos=False)
    r2 = client.completions.create(model="gw", prompt=p1 + s1 + obs, max_tokens=5, seed=2)
    rows = episode_rows(gw.records.turns("ids-multi"), gw.tok, "gw")
    assert len(rows) == 2  # the branch not continued, and the conversation
    branch, conv = rows
    assert branch.completion_token_ids == r1.choices[0].model_extra["token_ids"]
    s2 = r2.choices[0].model_extra["token_ids"]
    assert conv.completion_token_ids == s1 + obs + s2
    assert conv.completion_mask == [1] * len(s1) + [0] * len(obs) + [1] * len(s2)


def _turn(turn, version, prompt, ids, lps):
    return {"episode_id": "v", "turn": turn, "policy_version": version, "prompts": [prompt],
            "choices": [{"prompt_index": 0, "token_ids": ids, "logprobs": lps, "text": ""}]}


def test_a_turn_sampled_by_another_policy_version_starts_a_row_of_its_own(served):
    _, gw = served
    # turn 1 continues turn 0's ids exactly, but a newer version sampled it: one row per version
    turns = [_turn(0, 0, [257, 97], [98, 99], [-1.0, -2.0]),
             _turn(1, 1, [257, 97, 98, 99, 100], [101], [-0.5]),
             _turn(2, 1, [257, 97, 98, 99, 100, 101, 102], [103], [-0.25])]
    rows = episode_rows(turns, gw.tok, "gw")
    assert [(r.policy_version, r.end_reason, r.turns) for r in rows] == [
        (0, "split", 1), (1, "client", 2)]
    assert rows[1].completion_token_ids == [101, 102, 103]
    assert rows[1].completion_mask == [1, 0, 1]
    assert rows[1].sampling_logprobs == [-0.5, 0.0, -0.25]


def test_concurrent_requests_of_one_episode_each_get_a_whole_turn(served):
    srv, gw = served
    client = connect(srv, episode="concurrent")
    threads = [threading.Thread(target=client.completions.create,
                                kwargs={"model": "gw", "prompt": f"v{i} = ", "max_tokens": 3})
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns = gw.records.turns("concurrent")
    assert [t["turn"] for t in turns] == [0, 1, 2, 3]
    assert sorted(bytes(t["prompts"][0][1:]).decode() for t in turns) == [f"v{i} = " for i in range(4)]


def test_two_writers_on_one_folder_never_overwrite_a_turn(tmp_path):
    a, b = EpisodeLog(tmp_path), EpisodeLog(tmp_path)  # two gateways sharing the records
    got = [log.append("ep", {"who": who}) for log, who in ((a, "a"), (b, "b"), (a, "a2"))]
    assert got == [0, 1, 2]
    assert [t["who"] for t in a.turns("ep")] == ["a", "b", "a2"]
    assert not list(tmp_path.glob("ep/.tmp-*"))
