"""A real headless Chromium driven over the Chrome DevTools Protocol, for the report's page test.

The protocol travels over a pipe (``--remote-debugging-pipe``: fd 3 in, fd 4 out,
NUL-terminated JSON), as Puppeteer's pipe transport does: no port is opened, no
websocket library is needed, and nothing but this test can talk to the browser.
The page is loaded with every console message, uncaught exception, failed load and
request recorded, so that a test can say what a person opening the file would see.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    """Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it)."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageVisit:
    """What loading one page produced."""

    console_errors: list[str] = field(default_factory=list)    # console.error, uncaught exceptions, log errors
    failed_loads: list[str] = field(default_factory=list)      # Network.loadingFailed
    requested: list[str] = field(default_factory=list)         # every URL the page asked for
    screenshot: bytes = b""                                    # PNG of the whole page


class Chromium:
    """One headless Chromium process and one page target, spoken to over the debugging pipe."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="scalestudy-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--window-size={width},{height}", f"--user-data-dir={self._profile}", "about:blank"]
        # posix_spawn places the pipe ends at the protocol's fixed descriptors (3 reads commands,
        # 4 writes replies) in the child alone; every other descriptor of ours is close-on-exec
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_DUP2, to_child_r, 3), (os.POSIX_SPAWN_DUP2, from_child_w, 4)]
        # its own process group: close() can kill the renderers and the zygote with it
        self.pid = os.posix_spawn(binary, args, os.environ, file_actions=actions, setpgroup=0)
        self._group = self.pid
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        except BaseException:   # no __exit__ will run: leave no browser, pipe or profile behind
            self.close()
            raise

    def call(self, method: str, session: str | None = None, timeout: float = 60.0, **params) -> dict:
        """Send one command and wait for its reply; events that arrive meanwhile are kept."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _alive(self) -> bool:
        if self.pid is None:
            return False
        done, _ = os.waitpid(self.pid, os.WNOHANG)
        if done:
            self.pid = None
        return not done

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=self.session, **params)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline or not self._alive():
                raise TimeoutError("chromium did not answer over the debugging pipe")
            ready, _, _ = select.select([self._from_child], [], [], 0.5)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the debugging pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def visit(self, url: str, settle: float = 0.5) -> PageVisit:
        """Load ``url``, wait for its load event and its images, then screenshot the whole page."""
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.page(f"{domain}.enable")
        self.events.clear()
        self.page("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))
        self.evaluate("Promise.all([...document.images].map(i => i.decode().catch(() => null)))")
        time.sleep(settle)
        self.evaluate("1")   # drain the events that arrived meanwhile
        visit = PageVisit()
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                visit.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                visit.console_errors.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                visit.console_errors.append(f"{params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Network.loadingFailed":
                visit.failed_loads.append(f"{params.get('errorText')} ({params.get('requestId')})")
            elif method == "Network.requestWillBeSent":
                visit.requested.append(params["request"]["url"])
        metrics = self.page("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": metrics["width"], "height": min(metrics["height"], 6000),
                               "scale": 1})
        visit.screenshot = base64.b64decode(shot["data"])
        return visit

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited, results by value)."""
        result = self.page("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        for _ in range(100):
            if not self._alive():
                break
            time.sleep(0.1)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        try:
            os.killpg(self._group, 9)   # whatever of the group outlived the browser process
        except OSError:
            pass
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def file_url(path: Path) -> str:
    return Path(path).resolve().as_uri()
