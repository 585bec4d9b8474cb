"""The stage cache key's digest of a stage's inputs (flows/stages.py `inputs_digest`): a
function of the values alone. The digest's cross-process and shared-object tests, which use
the flow's fixtures, are in test_flows_stages.py."""
import numpy as np
import pandas as pd

from flows import stages


def test_the_digest_is_of_values_not_of_which_objects_are_shared():
    """Equal strings and lists, one object used twice or two objects made apart, give one key:
    the digest's bytes must not record sharing (a pickle memo would, and a resumed run builds
    its inputs apart). A plain type's subclass (numpy's float64, a str enum) is its value."""
    import enum  # noqa: PLC0415

    word = "".join(["pro", "cedural"])  # a new object, equal to the literal below
    ids = [1, 2, 3]
    shared = {"a": word, "b": word, "ids": [ids, ids], "x": 0.25}
    apart = {"a": "procedural", "b": "".join(["proc", "edural"]), "ids": [[1, 2, 3], [1, 2, 3]],
             "x": 0.25}
    assert shared["a"] is shared["b"] and apart["a"] is not apart["b"]
    assert stages.inputs_digest(shared) == stages.inputs_digest(apart)

    class Split(str, enum.Enum):
        train = "train"

    assert stages.inputs_digest({"s": Split.train, "x": np.float64(0.25)}) == \
        stages.inputs_digest({"s": "train", "x": 0.25})
    assert stages.inputs_digest(apart) != stages.inputs_digest({**apart, "x": 0.5})
    assert stages.inputs_digest({"x": 1}) != stages.inputs_digest({"x": 1.0})
    assert stages.inputs_digest({"x": float("nan")}) == stages.inputs_digest({"x": np.nan})


def test_a_frame_hashes_by_its_values_and_by_text_where_a_column_has_no_plain_form():
    frame = pd.DataFrame({"task_id": ["a", "b"], "samples": [8, 8], "mean": [0.5, float("nan")]})
    key = stages.inputs_digest({"ledger": frame})
    assert stages.inputs_digest({"ledger": frame.copy()}) == key
    assert stages.inputs_digest({"ledger": frame.assign(samples=[8, 9])}) != key
    assert stages.inputs_digest({"ledger": frame.rename(columns={"mean": "m"})}) != key
    when = frame.assign(at=pd.to_datetime(["2026-01-01", "2026-01-02"]))  # Timestamps
    assert stages.inputs_digest({"ledger": when}) == stages.inputs_digest({"ledger": when.copy()})
    later = when.assign(at=pd.to_datetime(["2026-01-01", "2026-01-03"]))
    assert stages.inputs_digest({"ledger": later}) != stages.inputs_digest({"ledger": when})
