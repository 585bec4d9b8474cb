"""How a reasoning-gym dataset is built from a task's recipe (name, options, level, seed, size):
the one definition, used by the grader (envs/reasoning_gym/datasets.py) and shipped verbatim
into the sandbox, where the harness rebuilds the entry it scores (it must stay self-contained:
the standard library and reasoning_gym only).

A level is reasoning-gym's own curriculum: every attribute of the dataset's curriculum at that
level, or at its top level where it has fewer; the options given go on top. Only the options
travel (plain JSON): the config itself may hold enums, dates or nested dataclasses.
"""


def build(name, options, level, seed, size):
    """The dataset; raises ValueError naming what is wrong (an unknown dataset or option, a
    level for a dataset without a curriculum, options the dataset refuses)."""
    import dataclasses

    from reasoning_gym.factory import CURRICULA, DATASETS

    if name not in DATASETS:
        raise ValueError("unknown reasoning-gym dataset %r" % (name,))
    dataset_cls, config_cls = DATASETS[name]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError("dataset %r: unknown options %s; it has %s"
                         % (name, unknown, sorted(fields - {"seed", "size"})))
    for k in ("seed", "size"):
        if k in options:
            raise ValueError("dataset %r: option %r is the kind's own (`seed`, "
                             "`tasks_per_level`), not a dataset option" % (name, k))
    kwargs = {}
    if level is not None:
        if name not in CURRICULA:
            raise ValueError("dataset %r has no reasoning-gym curriculum: give no `levels` "
                             "(its options alone set its difficulty)" % (name,))
        cur = CURRICULA[name]()
        for attr_name, attr in cur.attributes.items():
            cur.set_attr_level(attr_name, min(level, len(attr.levels) - 1))
        made = cur.generate_configuration({"seed": seed, "size": size})
        kwargs = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    kwargs.update(options)
    kwargs.update(seed=seed, size=size)
    try:
        config = config_cls(**kwargs)
        if hasattr(config, "validate"):
            config.validate()
        return dataset_cls(config=config)
    except (TypeError, ValueError, AssertionError, AttributeError, KeyError) as exc:
        raise ValueError("dataset %r: bad options %r: %s: %s"
                         % (name, options, type(exc).__name__, exc)) from None
