"""deploy/nginx/nginx.conf read as directives, and rendered to run here in front of real servers.

The file is written for the image Compose runs (nginx 1.27); the tests run Debian's nginx. Both
the parse and the rendering are small on purpose: they know this file, not all of nginx's syntax.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "nginx.conf"
NGINX = shutil.which("nginx")
#: Replicas' hostname in Compose: Docker's DNS resolves it, nothing here does.
REPLICAS = "tensor-ops-replica"


@dataclass
class Directive:
    """One directive: its name, its arguments and, for a block, the directives inside."""

    name: str
    args: list[str]
    block: list["Directive"] = field(default_factory=list)

    def all(self, name: str) -> list["Directive"]:
        return [child for child in self.block if child.name == name]

    def one(self, name: str) -> "Directive":
        found = self.all(name)
        assert len(found) == 1, f"{self.name} {self.args}: {len(found)} {name!r} directives"
        return found[0]

    def value(self, name: str) -> list[str]:
        return self.one(name).args


_TOKEN = re.compile(r'"[^"]*"|\'[^\']*\'|[{};]|[^\s{};]+')


def parse(text: str) -> Directive:
    """The configuration as the children of one root directive (comments dropped)."""
    tokens = _TOKEN.findall(re.sub(r"#[^\n]*", "", text))
    root = Directive("main", [])
    stack = [root]
    words: list[str] = []
    for token in tokens:
        if token == ";":
            stack[-1].block.append(Directive(words[0], words[1:]))
            words = []
        elif token == "{":
            child = Directive(words[0], words[1:])
            stack[-1].block.append(child)
            stack.append(child)
            words = []
        elif token == "}":
            assert not words, f"unterminated directive {words}"
            stack.pop()
        else:
            words.append(token.strip("\"'"))
    assert len(stack) == 1 and not words, "unbalanced braces"
    return root


def size_bytes(value: str) -> int:
    """nginx's size syntax: 300m, 1k, 512."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    match = re.fullmatch(r"(\d+)([kmg]?)", value.lower())
    assert match, value
    return int(match.group(1)) * units[match.group(2)]


def seconds(value: str) -> int:
    """nginx's time syntax, as far as this file uses it: 300s, 5m, 60."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600}
    match = re.fullmatch(r"(\d+)([smh]?)", value)
    assert match, value
    return int(match.group(1)) * units[match.group(2)]


def nginx_version() -> tuple[int, ...]:
    assert NGINX is not None
    banner = subprocess.run([NGINX, "-v"], capture_output=True, text=True, check=True).stderr
    match = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", banner)
    assert match, banner
    return tuple(int(part) for part in match.groups())


def render(
    run_dir: Path,
    upstreams: dict[int, list[str]],
    listens: dict[int, int],
    *,
    version: tuple[int, ...] = (1, 27, 5),
) -> Path:
    """The configuration to run in the foreground here, written to ``run_dir/nginx.conf``.

    ``upstreams`` maps each replica port the file names (8000, 8001) to the addresses of the
    servers standing in for the replicas; ``listens`` maps each port nginx listens on (8080,
    8081) to a port of 127.0.0.1. Logs go to ``run_dir``: ``access.log`` has one line per
    request, ``port|upstream addresses tried|status|uri``; ``timing.log`` has one line per
    request too, ``time|request time|upstream addresses|their statuses|their response
    times|status|uri|client's X-Request-ID|key check's upstream addresses|their statuses|their
    response times`` (times in seconds; lists as nginx writes them, one entry per replica
    tried, separated by ", "; the key check's fields empty for a request not checked).
    """
    text = CONFIG.read_text()

    def servers(match: re.Match[str]) -> str:
        parameters = match.group(2)
        return " ".join(f"server {address}{parameters};" for address in upstreams[int(match[1])])

    text, count = re.subn(rf"server {REPLICAS}:(\d+)([^;]*);", servers, text)
    assert count == len(upstreams), f"{count} upstream servers in {CONFIG}"
    text, count = re.subn(
        r"listen (\d+)", lambda match: f"listen 127.0.0.1:{listens[int(match[1])]}", text
    )
    assert count == len(listens), f"{count} listen directives in {CONFIG}"
    if version < (1, 25, 1):
        # Before 1.25.1 HTTP/2 is a parameter of listen; the "http2" directive came after it.
        text, count = re.subn(r"(listen [^;]+);(\s*)http2 on;", r"\1 http2;\2", text)
        assert count, "no listen followed by http2 on"
    temp_paths = "".join(
        f"\n    {kind}_temp_path {run_dir}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace(
        "http {",
        "http {\n    log_format calls '$server_port|$upstream_addr|$status|$request_uri';"
        "\n    log_format timing '$msec|$request_time|$upstream_addr|$upstream_status|"
        "$upstream_response_time|$status|$request_uri|$http_x_request_id|"
        "$tensor_ops_check_addr|$tensor_ops_check_status|$tensor_ops_check_time';"
        f"\n    access_log {run_dir}/access.log calls;"
        f"\n    access_log {run_dir}/timing.log timing;{temp_paths}",
        1,
    )
    # One process in the foreground, as this user: nothing to daemonise or hand to workers.
    preamble = (
        f"daemon off;\nmaster_process off;\npid {run_dir}/nginx.pid;\n"
        f"error_log {run_dir}/error.log;\n"
    )
    path = run_dir / "nginx.conf"
    path.write_text(preamble + text)
    return path
