"""A real trace consumer for the timeline tests: Chromium's DevTools trace engine (the model behind
the Performance panel's "Load profile"), driven headless over the DevTools protocol.

Chromium is started with --remote-debugging-pipe (protocol messages over file descriptors 3 and 4,
NUL-separated JSON: no network port, no websocket library). A page opens DevTools' own bundled
trace app, imports its trace engine module (models/trace/trace.js), parses the events and reports
what the engine made of them: the trace bounds and, per process and thread, the thread's name and
how many entries (complete events) it holds.

    summary = load_in_devtools(events)   # a list of trace events (a parsed timeline file)

Raises Unavailable when no Chromium is installed, and DevToolsError when Chromium or its trace
engine fails (the message says which step). Every wait is bounded.
"""

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

TRACE_APP = 'devtools://devtools/bundled/trace_app.html'
CANDIDATES = ('/usr/lib/chromium/chromium', 'chromium', 'chromium-browser', 'google-chrome')


class Unavailable(Exception):
    pass


class DevToolsError(Exception):
    pass


def chromium_binary():
    """The Chromium executable itself (Debian's /usr/bin/chromium is a wrapper script), or None."""
    for name in CANDIDATES:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


class _Browser:
    def __init__(self, binary, timeout):
        self.timeout = timeout
        # Protocol pipes, kept above the descriptors the child will use (3: commands, 4: replies).
        to_r, self.to_w = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe()]
        self.from_r, from_w = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe()]
        self.profile = tempfile.mkdtemp(prefix='hvd-devtools-')
        self.next_id = 0
        self.buffer = b''

        def child_fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [binary, '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
             '--remote-debugging-pipe', '--user-data-dir=' + self.profile, 'about:blank'],
            preexec_fn=child_fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        os.close(to_r)
        os.close(from_w)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        message = {'id': self.next_id, 'method': method, 'params': params or {}}
        if session:
            message['sessionId'] = session
        os.write(self.to_w, json.dumps(message).encode() + b'\0')
        deadline = time.time() + self.timeout
        while True:
            while b'\0' in self.buffer:
                raw, self.buffer = self.buffer.split(b'\0', 1)
                reply = json.loads(raw)
                if reply.get('id') == self.next_id:
                    if 'error' in reply:
                        raise DevToolsError('{} failed: {}'.format(method, reply['error']))
                    return reply['result']
            left = deadline - time.time()
            if left <= 0:
                raise DevToolsError('{} got no answer within {} s'.format(method, self.timeout))
            ready, _, _ = select.select([self.from_r], [], [], left)
            if ready:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise DevToolsError('chromium exited during {}: {}'.format(method, self._stderr_tail()))
                self.buffer += chunk

    def evaluate(self, session, expression):
        result = self.call('Runtime.evaluate', {'expression': expression, 'returnByValue': True,
                                                'awaitPromise': True}, session)
        if 'exceptionDetails' in result:
            details = result['exceptionDetails']
            text = details.get('exception', {}).get('description') or details.get('text')
            raise DevToolsError('the page threw: {}'.format(text))
        return result['result'].get('value')

    def _stderr_tail(self):
        try:
            self.proc.kill()
            return self.proc.communicate(timeout=5)[1].decode(errors='replace')[-2000:]
        except Exception:  # noqa: BLE001 - only for the message
            return '(no stderr)'

    def close(self):
        try:
            self.call('Browser.close')
        except Exception:  # noqa: BLE001 - closing a browser that already failed
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        os.close(self.to_w)
        os.close(self.from_r)
        shutil.rmtree(self.profile, ignore_errors=True)


# Runs in the trace app's page: parse with the trace engine, summarise per thread.
_PARSE = r'''
(async () => {
  const Trace = await import('./models/trace/trace.js');
  const events = JSON.parse(%s);
  const model = Trace.TraceModel.Model.createWithAllHandlers();
  await model.parse(events);
  const data = model.parsedTrace(0).data;
  const threads = [];
  for (const [pid, process] of data.Renderer.processes) {
    for (const [tid, thread] of process.threads) {
      threads.push({pid: Number(pid), tid: Number(tid), name: thread.name === undefined ? null : thread.name,
                    entries: (thread.entries || []).length});
    }
  }
  const bounds = data.Meta.traceBounds;
  return {min: bounds.min, max: bounds.max, threads: threads};
})()
'''


def load_in_devtools(events, timeout=60):
    """Parses `events` (a list of trace-event dicts) with Chromium's DevTools trace engine; returns
    {'min': us, 'max': us, 'threads': [{'pid', 'tid', 'name', 'entries'}, ...]}."""
    binary = chromium_binary()
    if binary is None:
        raise Unavailable('no Chromium found (apt-get install chromium; looked for {})'.format(', '.join(CANDIDATES)))
    browser = _Browser(binary, timeout)
    try:
        targets = browser.call('Target.getTargets')['targetInfos']
        page = next(t for t in targets if t['type'] == 'page')
        session = browser.call('Target.attachToTarget', {'targetId': page['targetId'], 'flatten': True})['sessionId']
        navigated = browser.call('Page.navigate', {'url': TRACE_APP}, session)
        if navigated.get('errorText'):
            raise DevToolsError('opening {} failed: {}'.format(TRACE_APP, navigated['errorText']))
        deadline = time.time() + timeout
        while browser.evaluate(session, 'document.readyState') != 'complete':
            if time.time() > deadline:
                raise DevToolsError('{} did not finish loading within {} s'.format(TRACE_APP, timeout))
            time.sleep(0.1)
        return browser.evaluate(session, _PARSE % json.dumps(json.dumps(events)))
    finally:
        browser.close()
