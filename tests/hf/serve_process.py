"""Helpers of the Python checks of tests/hf: a `roformer serve --port 0` process (started, its port read from
its "listening on" line, stopped with SIGTERM, which must exit 0) and the case1 fixture as a model directory."""
import os
import re
import shutil
import signal
import subprocess
import time


class Server:
    def __init__(self, roformer, args, log_path, env=None):
        self.log = open(log_path, "w+")
        self.process = subprocess.Popen([roformer, "serve", "--port", "0", *args], stderr=self.log, env=env)
        self.port = None
        for _ in range(600):  # up to 60 s on a loaded machine
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        if not self.port:
            self.process.kill()
            self.log.seek(0)
            raise AssertionError(f"the server did not start: {self.log.read()}")
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        assert status == 0, f"exit status {status}"


def case1_dir(fixtures, path):
    """The roformer-hf case1 model (RoFormerForMaskedLM) with the fixtures' tokenizer files, in `path`."""
    os.makedirs(path, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(fixtures, "case1_mlm_basic", f), path)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixtures, "tokenizer", f), path)
    return path
