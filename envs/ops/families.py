"""The ops task families: each draws, from one RNG, a small system (path -> file), the goal in
words, a reference bash script (idempotent: run twice, it leaves the same state) and the state
probes that grade it (`envs/ops/probes.py`).

Levels: 1, one file (`ini_set`, `json_set`, `cron_add`, `fix_modes`, `enable_site`); 2, several
steps (`add_user`, `yaml_edit`, `replace_host`, `archive_site`, `rotate_logs`); 3, a whole change
with a backup and a rollback (`change_with_rollback`, `deploy_release`).
"""
from __future__ import annotations

import base64
import gzip
import random
from dataclasses import dataclass, field
from typing import Callable

APPS = ["billing", "search", "ledger", "gateway", "media", "report", "auth", "queue", "cache",
        "mailer", "metrics", "uploads"]
HOSTS = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "sierra", "tango", "zulu"]
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
PASSWD = ("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
          "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n")
GROUP = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\n"


@dataclass
class Spec:
    files: dict  # path -> {"content", "mode"} | {"dir": True, "mode"} | {"link"}
    goal: str
    reference: str
    probes: list[dict]
    show: list[str] = field(default_factory=list)  # files whose content the prompt shows
    difficulty: int = 1


def _f(content: str, mode: int = 0o644) -> dict:
    return {"content": content, "mode": mode}


def ini_set(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    path = f"etc/{app}/{app}.ini"
    workers, new = rng.randint(2, 6), rng.randint(8, 32)
    sec = rng.choice(["server", "worker"])
    text = (f"[server]\nhost = 0.0.0.0\nport = {rng.randint(8000, 8999)}\n\n[worker]\n"
            f"threads = {workers}\nqueue = {rng.choice(HOSTS)}\n")
    key = "port" if sec == "server" else "threads"
    new = rng.randint(9000, 9999) if key == "port" else new
    ref = f"sed -i '/^\\[{sec}\\]/,/^\\[/ s/^{key} *=.*/{key} = {new}/' /{path}\n"
    return Spec({path: _f(text)}, f"In /{path}, set `{key}` in section [{sec}] to {new}.", ref, [
        {"name": f"{sec}.{key} = {new}", "type": "value", "path": path, "format": "ini",
         "keys": [sec, key], "value": str(new)},
        {"name": "ini valid", "type": "valid", "path": path, "format": "ini",
         "requires": [f"{sec}.{key} = {new}"]},
        {"name": "other keys kept", "type": "same_except", "path": path, "format": "ini",
         "except": [[sec, key]], "requires": [f"{sec}.{key} = {new}"]},
    ], [path])


def json_set(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    path = f"etc/{app}/config.json"
    port, new = rng.randint(8000, 8999), rng.randint(9000, 9999)
    text = ('{\n  "server": {"host": "127.0.0.1", "port": %d},\n  "log": {"level": "info", '
            '"file": "/var/log/%s.log"}\n}\n' % (port, app))
    key = rng.choice(["port", "level"])
    if key == "port":
        keys, value, jq = ["server", "port"], new, f".server.port = {new}"
    else:
        value = rng.choice(["debug", "warning", "error"])
        keys, jq = ["log", "level"], f'.log.level = "{value}"'
    ref = f"jq '{jq}' /{path} > /{path}.new && mv /{path}.new /{path}\n"
    what = ".".join(keys)
    return Spec({path: _f(text)}, f"In /{path}, set `{what}` to {value} (a JSON "
                f"{'number' if key == 'port' else 'string'}).", ref, [
        {"name": f"{what} = {value}", "type": "value", "path": path, "format": "json",
         "keys": keys, "value": value},
        {"name": "json valid", "type": "valid", "path": path, "format": "json",
         "requires": [f"{what} = {value}"]},
        {"name": "other keys kept", "type": "same_except", "path": path, "format": "json",
         "except": [keys], "requires": [f"{what} = {value}"]},
    ], [path])


def cron_add(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    path = f"etc/cron.d/{app}"
    old = f"0 3 * * * root /opt/{app}/bin/cleanup.sh\n"
    line = f"*/{rng.choice([5, 10, 15, 30])} * * * * {app} /opt/{app}/bin/sync.sh"
    text = f"SHELL=/bin/sh\n# {app} jobs\n{old}"
    ref = f"grep -qxF '{line}' /{path} || echo '{line}' >> /{path}\n"
    return Spec({path: _f(text), f"opt/{app}/bin/sync.sh": _f("#!/bin/sh\n", 0o755)},
                f"Add this cron job line to /{path} (once, keeping the file's other lines):\n"
                f"{line}", ref, [
        {"name": "job line once", "type": "file", "path": path, "lines": [line]},
        {"name": "crontab valid", "type": "valid", "path": path, "format": "cron",
         "requires": ["job line once"]},
        {"name": "old lines kept", "type": "file", "path": path,
         "lines": ["SHELL=/bin/sh", f"# {app} jobs", old.strip()], "mode": 0o644,
         "requires": ["job line once"]},
    ], [path])


def fix_modes(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    scripts = sorted(rng.sample(["start.sh", "stop.sh", "migrate.sh", "health.sh"], 2))
    keys = sorted(rng.sample(["tls.key", "api.key", "db.key"], 2))
    files = {f"srv/{app}/bin/{s}": _f("#!/bin/sh\necho ok\n") for s in scripts}
    files.update({f"srv/{app}/secret/{k}": _f(f"KEY-{rng.randint(1000, 9999)}\n") for k in keys})
    files[f"srv/{app}/secret"] = {"dir": True, "mode": 0o755}
    ref = (f"chmod 755 /srv/{app}/bin/*.sh\nchmod 600 /srv/{app}/secret/*\n"
           f"chmod 700 /srv/{app}/secret\n")
    probes = [{"name": f"{s} 0755", "type": "file", "path": f"srv/{app}/bin/{s}", "mode": 0o755}
              for s in scripts]
    probes += [{"name": f"{k} 0600", "type": "file", "path": f"srv/{app}/secret/{k}",
                "mode": 0o600} for k in keys]
    probes += [{"name": "secret/ 0700", "type": "dir", "path": f"srv/{app}/secret", "mode": 0o700}]
    return Spec(files, f"Under /srv/{app}: make the scripts in bin/ mode 0755, the files in "
                f"secret/ mode 0600 and the folder secret/ itself 0700.", ref, probes)


def enable_site(rng: random.Random) -> Spec:
    site = f"{rng.choice(HOSTS)}.example.{rng.choice(['org', 'com', 'net'])}"
    avail, enabled = "etc/nginx/sites-available", "etc/nginx/sites-enabled"
    files = {f"{avail}/default": _f("server { listen 80 default_server; }\n"),
             f"{avail}/{site}": _f(f"server {{ listen 80; server_name {site}; }}\n"),
             f"{enabled}/default": {"link": "../sites-available/default"}}
    ref = (f"ln -sfn /{avail}/{site} /{enabled}/{site}\nrm -f /{enabled}/default\n")
    return Spec(files, f"Enable the nginx site {site} (a symlink /{enabled}/{site} to "
                f"/{avail}/{site}) and disable the default site (remove its link in "
                f"sites-enabled, keep the file in sites-available).", ref, [
        {"name": "site enabled", "type": "link", "path": f"{enabled}/{site}",
         "to": f"{avail}/{site}"},
        {"name": "default disabled", "type": "absent", "path": f"{enabled}/default"},
        {"name": "available kept", "type": "unchanged",
         "paths": [f"{avail}/default", f"{avail}/{site}"], "requires": ["site enabled"]},
    ], [])


def add_user(rng: random.Random) -> Spec:
    user, uid = rng.choice(USERS), rng.randint(1001, 1999)
    pw = f"{user}:x:{uid}:{uid}:{user.title()}:/home/{user}:/bin/bash"
    gr = f"{user}:x:{uid}:"
    profile = f"# ~/.profile\nexport PATH=$HOME/bin:$PATH\numask {rng.choice(['022', '027'])}\n"
    files = {"etc/passwd": _f(PASSWD), "etc/group": _f(GROUP), "etc/skel/.profile": _f(profile),
             "home": {"dir": True, "mode": 0o755}}
    ref = (f"grep -q '^{user}:' /etc/passwd || echo '{pw}' >> /etc/passwd\n"
           f"grep -q '^{user}:' /etc/group || echo '{gr}' >> /etc/group\n"
           f"mkdir -p /home/{user}\ncp /etc/skel/.profile /home/{user}/.profile\n"
           f"chmod 750 /home/{user}\n")
    return Spec(files, f"Add the user {user} by hand (no useradd): uid and gid {uid}, a group of "
                f"the same name, full name {user.title()}, home /home/{user}, shell /bin/bash. "
                f"Create the home folder with mode 0750 and a copy of /etc/skel/.profile in it.",
                ref, [
        {"name": "passwd line", "type": "file", "path": "etc/passwd", "lines": [pw]},
        {"name": "group line", "type": "file", "path": "etc/group", "lines": [gr]},
        {"name": "passwd valid", "type": "valid", "path": "etc/passwd", "format": "passwd",
         "requires": ["passwd line"]},
        {"name": "group valid", "type": "valid", "path": "etc/group", "format": "group",
         "requires": ["group line"]},
        {"name": "home 0750", "type": "dir", "path": f"home/{user}", "mode": 0o750},
        {"name": ".profile copied", "type": "file", "path": f"home/{user}/.profile",
         "content": profile},
    ], ["etc/passwd", "etc/group"], 2)


def yaml_edit(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    path = f"etc/{app}/config.yaml"
    hosts = sorted(rng.sample(HOSTS, 3))
    old, new = hosts[:2], f"{hosts[2]}.internal"
    reps = rng.randint(5, 9)
    text = (f"name: {app}\nreplicas: 2\nallowed_hosts:\n  - {old[0]}.internal\n"
            f"  - {old[1]}.internal\nlogging:\n  level: info\n")
    ref = (f"sed -i 's/^replicas: .*/replicas: {reps}/' /{path}\n"
           f"grep -qx '  - {new}' /{path} || sed -i '/^allowed_hosts:/a\\  - {new}' /{path}\n")
    return Spec({path: _f(text)}, f"In /{path}, set replicas to {reps} and add {new} to "
                f"allowed_hosts (keep the others).", ref, [
        {"name": f"replicas = {reps}", "type": "value", "path": path, "format": "yaml",
         "keys": ["replicas"], "value": reps},
        {"name": "yaml valid", "type": "valid", "path": path, "format": "yaml",
         "requires": [f"replicas = {reps}"]},
        {"name": f"{new} allowed", "type": "contains", "path": path, "format": "yaml",
         "keys": ["allowed_hosts"], "item": new},
        {"name": "old hosts kept", "type": "contains", "path": path, "format": "yaml",
         "keys": ["allowed_hosts"], "item": f"{old[0]}.internal",
         "requires": [f"{new} allowed"]},
        {"name": "other keys kept", "type": "same_except", "path": path, "format": "yaml",
         "except": [["replicas"], ["allowed_hosts"]], "requires": [f"replicas = {reps}"]},
    ], [path], 2)


def replace_host(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    a, b = rng.sample(HOSTS, 2)
    old, new = f"db-{a}.internal", f"db-{b}.internal"
    names = sorted(rng.sample(["main", "replica", "jobs", "api"], 3))
    files = {f"etc/{app}/{n}.conf": _f(f"# {n}\ndb_host = {old}\ndb_port = 5432\n"
                                       f"fallback = {old}\n") for n in names}
    notes = f"We moved off {old} in March.\n"
    files[f"etc/{app}/NOTES.txt"] = _f(notes)
    ref = f"sed -i 's/{old.replace('.', chr(92) + '.')}/{new}/g' /etc/{app}/*.conf\n"
    probes = [{"name": f"{n}.conf", "type": "file", "path": f"etc/{app}/{n}.conf",
               "content": f"# {n}\ndb_host = {new}\ndb_port = 5432\nfallback = {new}\n"}
              for n in names]
    probes.append({"name": "NOTES.txt untouched", "type": "unchanged",
                   "paths": [f"etc/{app}/NOTES.txt"], "requires": [f"{names[0]}.conf"]})
    return Spec(files, f"Replace every {old} with {new} in the *.conf files of /etc/{app}/ "
                f"(only those: leave other files alone).", ref, probes,
                [f"etc/{app}/{names[0]}.conf", f"etc/{app}/NOTES.txt"], 2)


def archive_site(rng: random.Random) -> Spec:
    site = rng.choice(HOSTS)
    root = f"srv/www/{site}"
    keep = {f"{site}/index.html": f"<h1>{site}</h1>\n", f"{site}/css/site.css": "body{}\n",
            f"{site}/img/logo.txt": f"logo {rng.randint(1, 99)}\n"}
    files = {f"srv/www/{k}": _f(v) for k, v in keep.items()}
    files[f"{root}/cache/page.tmp"] = _f("tmp\n")
    files[f"{root}/old.tmp"] = _f("tmp\n")
    out = f"var/backups/{site}.tar.gz"
    ref = (f"mkdir -p /var/backups\n"
           f"tar -C /srv/www --exclude='*.tmp' -czf /{out} {site}\n")
    return Spec(files, f"Archive the folder /{root} into /{out} (gzip'd tar, members named "
                f"{site}/..., relative to /srv/www), leaving out every *.tmp file. Keep the "
                f"site itself as it is.", ref, [
        {"name": "archive members", "type": "archive", "path": out, "members": keep},
        {"name": "site kept", "type": "unchanged", "paths": sorted(files),
         "requires": ["archive members"]},
    ], [], 2)


def rotate_logs(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    d = f"var/log/{app}"
    keep = rng.choice([3, 4])
    plain = {n: f"{app} log {n}: {'line ' * rng.randint(2, 5)}\n" for n in (1, 2)}
    files = {f"{d}/{app}.log": _f(f"{app} current\n")}
    files.update({f"{d}/{app}.log.{n}": _f(t) for n, t in plain.items()})
    for n in range(3, keep + 3):
        files[f"{d}/{app}.log.{n}.gz"] = {"content_b64": base64.b64encode(
            gzip.compress(f"old {n}\n".encode(), mtime=0)).decode(), "mode": 0o644}
    ref = (f"cd /{d}\nfor f in {app}.log.[0-9]*; do\n  case $f in *.gz) ;; *) gzip -f \"$f\";; "
           f"esac\ndone\nfor f in {app}.log.*.gz; do\n  n=${{f#{app}.log.}}; n=${{n%.gz}}\n"
           f"  if [ \"$n\" -gt {keep} ]; then rm -f \"$f\"; fi\ndone\n")
    probes = [{"name": f"{app}.log.{n}.gz", "type": "gzip", "path": f"{d}/{app}.log.{n}.gz",
               "content": t} for n, t in plain.items()]
    probes += [{"name": "plain rotated gone", "type": "absent", "path": f"{d}/{app}.log.1",
                "requires": [f"{app}.log.1.gz"]}]
    probes += [{"name": f"{app}.log.{n}.gz pruned", "type": "absent",
                "path": f"{d}/{app}.log.{n}.gz"} for n in range(keep + 1, keep + 3)]
    probes += [{"name": "current log kept", "type": "unchanged", "paths": [f"{d}/{app}.log"],
                "requires": [f"{app}.log.1.gz"]}]
    return Spec(files, f"Rotate the logs in /{d}: gzip every {app}.log.N that is not "
                f"compressed yet, then delete the compressed ones numbered above {keep}. "
                f"Leave {app}.log alone.", ref, probes, [], 2)


def change_with_rollback(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    path, bak = f"etc/{app}/{app}.conf", f"var/backups/{app}.conf.orig"
    port, new = rng.randint(8000, 8999), rng.randint(9000, 9999)
    text = f"# {app}\nlisten={port}\nworkers={rng.randint(2, 8)}\n"
    after = text.replace(f"listen={port}", f"listen={new}") + "tls=on\n"
    ref = (f"set -e\nmkdir -p /var/backups\n[ -e /{bak} ] || cp -p /{path} /{bak}\n"
           f"sed -i 's/^listen=.*/listen={new}/' /{path}\n"
           f"grep -qx 'tls=on' /{path} || echo 'tls=on' >> /{path}\n"
           f"cat > /root/rollback.sh <<'EOF'\n#!/bin/bash\ncp -p /{bak} /{path}\nEOF\n"
           f"chmod 700 /root/rollback.sh\n")
    return Spec({path: _f(text)}, f"Change /{path} to listen on {new} and add the line "
                f"tls=on. First keep the original file at /{bak} (exact copy). Then write "
                f"/root/rollback.sh (mode 0700), a script that puts the original back.", ref, [
        {"name": "backup exact", "type": "file", "path": bak, "content": text},
        {"name": "change applied", "type": "file", "path": path, "content": after},
        {"name": "rollback script", "type": "file", "path": "root/rollback.sh", "mode": 0o700},
        {"name": "rollback restores", "type": "rollback", "script": "/root/rollback.sh",
         "paths": [path], "requires": ["change applied"]},
    ], [path], 3)


def deploy_release(rng: random.Random) -> Spec:
    app = rng.choice(APPS)
    base = f"srv/{app}"
    old, new = f"1.{rng.randint(0, 8)}.0", f"2.{rng.randint(0, 8)}.0"
    code = f"print('{app}')\n"
    files = {f"{base}/releases/{old}/app.py": _f(code),
             f"{base}/releases/{old}/VERSION": _f(old + "\n"),
             f"{base}/current": {"link": f"releases/{old}"}}
    ref = (f"set -e\ncd /{base}\nif [ ! -d releases/{new} ]; then\n"
           f"  cp -a releases/{old} releases/{new}\nfi\necho {new} > releases/{new}/VERSION\n"
           f"ln -sfn releases/{new} current\n"
           f"printf '#!/bin/bash\\nln -sfn releases/{old} /{base}/current\\n' "
           f"> /root/rollback.sh\nchmod 700 /root/rollback.sh\n")
    return Spec(files, f"Deploy release {new} of /{base}: make releases/{new} as a copy of "
                f"releases/{old} whose VERSION file reads {new}, point the symlink current at "
                f"it, keep releases/{old} as it is, and write /root/rollback.sh (mode 0700) "
                f"that points current back at {old}.", ref, [
        {"name": "release files", "type": "file", "path": f"{base}/releases/{new}/app.py",
         "content": code},
        {"name": "VERSION", "type": "file", "path": f"{base}/releases/{new}/VERSION",
         "content": new + "\n"},
        {"name": "current switched", "type": "link", "path": f"{base}/current",
         "to": f"{base}/releases/{new}"},
        {"name": "old release kept", "type": "unchanged",
         "paths": [f"{base}/releases/{old}/app.py", f"{base}/releases/{old}/VERSION"],
         "requires": ["current switched"]},
        {"name": "rollback restores", "type": "rollback", "script": "/root/rollback.sh",
         "paths": [f"{base}/current"], "requires": ["current switched"]},
    ], [], 3)


FAMILIES: dict[str, Callable[[random.Random], Spec]] = {
    f.__name__: f for f in (ini_set, json_set, cron_add, fix_modes, enable_site, add_user,
                            yaml_edit, replace_host, archive_site, rotate_logs,
                            change_with_rollback, deploy_release)}
