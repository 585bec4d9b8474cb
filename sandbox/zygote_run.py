"""How a zygote's child runs its program: as the interpreter runs `script.py` or `-c code`.

Shipped into the sandbox together with `sandbox/zygote.py` (one source; standard library only).
The program runs at the forked interpreter's top level in a fresh `__main__` module with the
globals, `sys.argv`, `sys.orig_argv` and file name the interpreter would give it; an uncaught
exception is printed by `sys.excepthook` without this file's frame, `SystemExit` ends it as the
interpreter ends it, and so do KeyboardInterrupt (by SIGINT) and a failing flush of stdout (120).
The exit keeps what a program can observe (non-daemon threads joined, atexit callbacks, the
teardown of its own `__main__` objects, stdio flushed) and skips the teardown of every module the
zygote loaded: releasing them would copy the zygote's whole heap, page by page, for nothing.

The zygote keeps compiled the graders' harness scripts the host registered (`trust_script`): a
child whose file holds exactly those bytes reuses the code object.
"""
import gc
import os
import signal
import sys

def _run(job, mount):
    """In the child: run the program as the interpreter runs `script.py` or `-c code`."""
    import builtins

    argv = job["argv"]
    sys.argv[:] = argv[1:] if argv[0] == "-c" else argv
    if argv[0] == "-c":
        sys.argv[0] = "-c"
    sys.orig_argv[:] = job["orig_argv"]
    main = type(sys)("__main__")
    d = main.__dict__
    d.update(__annotations__={}, __builtins__=builtins)
    if argv[0] == "-c":
        d["__loader__"] = sys.modules["__main__"].__loader__  # the BuiltinImporter, as for -c
        filename, source = "<string>", argv[1]
    else:
        filename = argv[0] if argv[0].startswith("/") else mount + "/" + argv[0]
        loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", filename)
        d.update(__file__=filename, __cached__=None, __loader__=loader)
    sys.modules["__main__"] = main
    code = 0
    try:
        if argv[0] != "-c":
            with open(filename, "rb") as fh:
                source = fh.read()
        program = _CODE.get((filename, source)) if argv[0] != "-c" else None
        if program is None:
            program = compile(source, filename, "exec", dont_inherit=True)
        _CODE.clear()  # the other scripts' code is none of this program's business
        del argv, job, source, filename
        exec(program, d)
    except SystemExit as exc:  # what the interpreter's handle_system_exit does
        code = _exit_code(exc.code)
    except BaseException as exc:  # what the interpreter's PyErr_Print does, minus this frame
        err = exc.with_traceback(exc.__traceback__.tb_next)
        code = 1
        _print_exception(err)
        if isinstance(err, KeyboardInterrupt):
            code = -signal.SIGINT  # the interpreter then dies by SIGINT
        del err
    _finalize(d, code)


def _exit_code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    try:
        sys.stderr.write(str(value) + "\n")
    except BaseException:
        pass
    return 1


def _print_exception(err):
    sys.last_type, sys.last_value, sys.last_traceback = type(err), err, err.__traceback__
    try:
        sys.excepthook(type(err), err, err.__traceback__)
    except BaseException as hook_exc:
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_exc), hook_exc, hook_exc.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(err), err, err.__traceback__)


def _finalize(main_dict, code):
    """The observable part of the interpreter's exit (non-daemon threads joined, atexit
    callbacks, stdio flushed, the program's own objects released), then _exit: tearing down
    every inherited module would copy the zygote's whole heap, page by page, for nothing."""
    import atexit

    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    if not _flush(sys.stdout, unraisable=True):
        code = 120 if code >= 0 else code
    for key in [k for k in main_dict if k.startswith("_") and k != "__builtins__"]:
        main_dict[key] = None  # the interpreter's own order: underscored names first
    for key in [k for k in main_dict if k != "__builtins__"]:
        main_dict[key] = None
    del main_dict
    gc.collect()  # the program's own cycles (the zygote's objects are frozen, left untouched)
    _flush(sys.stdout, unraisable=False)
    _flush(sys.stderr, unraisable=False)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    try:
        os._exit(code & 0xFF)
    except (OverflowError, TypeError):
        os._exit(255)


def _flush(stream, unraisable):
    if stream is None or getattr(stream, "closed", True):
        return True
    try:
        stream.flush()
        return True
    except BaseException as exc:
        if unraisable:
            try:
                sys.stderr.write("Exception ignored in: %r\n" % (stream,))
                exc = exc.with_traceback(None)  # raised in C at exit: no Python frames
                sys.__excepthook__(type(exc), exc, None)
            except BaseException:
                pass
        return False



_CODE = {}  # (file name, source bytes) -> code object, compiled here, inherited by children
_CODE_MAX = 32


def remember(script, source, mount):
    """Compile a script the host has seen before (a grader's harness, typically), so that the
    children find it compiled. Not if compiling warns: the child's own compile must say so."""
    import warnings

    filename = script if script.startswith("/") else mount + "/" + script
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = compile(source, filename, "exec", dont_inherit=True)
    except Exception:
        return
    if caught:
        return
    _CODE[(filename, source)] = code
    while len(_CODE) > _CODE_MAX:
        del _CODE[next(iter(_CODE))]
