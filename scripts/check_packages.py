"""Reads `cargo metadata` on stdin; checks what crates.io and docs.rs need of every publishable
workspace crate, and that no resolved dependency needs a newer Rust than the workspace's
`rust-version`. Prints the publishable crates as `-p NAME` arguments; exits 1 naming each
problem."""

import json
import sys

FIELDS = ("description", "readme", "keywords", "categories", "documentation", "rust_version", "license")
UNPUBLISHED = ("hare-outbox-testkit", "hare-outbox-bench")


def version(text):
    return tuple(int(x) for x in text.split("."))[:2]


def main():
    meta = json.load(sys.stdin)
    members = set(meta["workspace_members"])
    msrv = None
    problems = []
    names = []
    for p in meta["packages"]:
        if p["id"] not in members:
            continue
        msrv = msrv or p.get("rust_version")
        if p.get("publish") == []:
            continue
        names.append(p["name"])
        for field in FIELDS:
            if not p.get(field):
                problems.append(f"{p['name']}: no {field}")
        if "example.invalid" in json.dumps(p):
            problems.append(f"{p['name']}: a placeholder URL")
        if not (p.get("metadata") or {}).get("docs", {}).get("rs", {}).get("all-features"):
            problems.append(f"{p['name']}: no [package.metadata.docs.rs] all-features = true")
        for d in p["dependencies"]:
            if d["kind"] is None and d["name"] in UNPUBLISHED:
                problems.append(f"{p['name']}: depends on the unpublished {d['name']}")
    if msrv is None:
        problems.append("no workspace crate states a rust-version")
    else:
        for p in meta["packages"]:
            if p.get("rust_version") and version(p["rust_version"]) > version(msrv):
                problems.append(
                    f"{p['name']} {p['version']} needs Rust {p['rust_version']}, above our rust-version {msrv}"
                )
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)
    print(" ".join(f"-p {n}" for n in sorted(names)))


main()
