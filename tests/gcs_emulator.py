"""A local GCS server for the tests: the gcp-storage-emulator package, in its own process.

`Emulator(root)` starts it on a free port with its objects stored under
`root`, so that `stop()` then `start()` is an outage that loses nothing;
`env` points every client the code uses at it through their documented
settings:

  STORAGE_EMULATOR_HOST            gcsfs (etils.epath's gs://), google-cloud-storage
                                   (tensorboardX's event files)
  TENSORSTORE_GCS_HTTP_URL         tensorstore (orbax's arrays)
  CLOUD_STORAGE_EMULATOR_ENDPOINT  google-cloud-cpp (ArrayRecord's reader)
  GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false
                                   gcsfs skips its probe of the bucket type over
                                   gRPC with TLS, which the plain-HTTP emulator
                                   cannot answer (gcsfs waits 60 s, then falls back)
  EPATH_USE_TF=false               epath uses gcsfs, as it does where TensorFlow
                                   is not installed (the tests install it)

`refuse(pattern)` makes the server answer 403 Forbidden to requests for the
objects whose names match, as GCS does while access is lost for a while.

Run as a program (`python -m tests.gcs_emulator ROOT PORT BUCKET`), this
module is the server. The emulator leaves out the headers with which GCS
answers every object download (x-goog-generation, x-goog-metageneration,
x-goog-stored-content-length); tensorstore reads an object's generation from
them and refuses a download without, so the server adds them from the
object's own metadata. The emulator ignores preconditions (ifGenerationMatch),
which only matters to several writers of one object; the tests have one.
"""

from http import HTTPStatus
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

BUCKET = 'electra-test'
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Emulator:
  def __init__(self, root: str):
    self.root = root
    with socket.socket() as s:
      s.bind(('localhost', 0))
      self.port = s.getsockname()[1]
    self.url = f'http://localhost:{self.port}'
    self.env = {
      'STORAGE_EMULATOR_HOST': self.url,
      'TENSORSTORE_GCS_HTTP_URL': self.url,
      'CLOUD_STORAGE_EMULATOR_ENDPOINT': self.url,
      'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false',
      'EPATH_USE_TF': 'false',
      'GOOGLE_CLOUD_PROJECT': 'electra-test',
    }
    self._process: subprocess.Popen | None = None
    self.start()

  def start(self) -> None:
    self._process = subprocess.Popen(
      [sys.executable, '-m', 'tests.gcs_emulator', self.root, str(self.port), BUCKET],
      cwd=_REPO,
      stdout=subprocess.DEVNULL,
      stderr=open(os.path.join(self.root, 'emulator.log'), 'ab'),
    )
    deadline = time.monotonic() + 30
    while True:
      try:
        urllib.request.urlopen(f'{self.url}/storage/v1/b/{BUCKET}', timeout=1)
        return
      except OSError:
        assert self._process.poll() is None, open(os.path.join(self.root, 'emulator.log')).read()
        assert time.monotonic() < deadline, 'the GCS emulator did not start in 30 s'
        time.sleep(0.1)

  def refuse(self, pattern: str, count: int | None = None) -> None:
    """Answers 403 to requests for objects matching `pattern` (`count` of them, or all)."""
    with open(os.path.join(self.root, 'refuse.json'), 'w') as f:
      json.dump({'pattern': pattern, 'count': count}, f)

  def stop_refusing(self) -> None:
    os.remove(os.path.join(self.root, 'refuse.json'))

  def stop(self) -> None:
    if self._process is not None:
      self._process.terminate()
      self._process.wait()
      self._process = None


def _serve(root: str, port: int, bucket: str) -> None:
  from gcp_storage_emulator import server  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator.handlers import objects  # pylint: disable=g-import-not-at-top

  download = objects.download

  def download_with_generation(request, response, storage, *args, **kwargs):
    try:
      obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
    except Exception:  # The emulator's own handler answers 404.
      obj = None
    if obj is not None:
      response['x-goog-generation'] = obj['generation']
      response['x-goog-metageneration'] = obj['metageneration']
      response['x-goog-stored-content-length'] = obj['size']
    return download(request, response, storage, *args, **kwargs)

  refusals = os.path.join(root, 'refuse.json')

  def refused(request, response) -> bool:
    """Answers 403 while ROOT/refuse.json names this object: {"pattern": a regex
    of object names, "count": how many requests to refuse (null: all)}."""
    if not os.path.exists(refusals):
      return False
    with open(refusals) as f:
      rule = json.load(f)
    if not re.search(rule['pattern'], request.params.get('object_id') or ''):
      return False
    if rule['count'] is not None:
      if rule['count'] <= 0:
        return False
      rule['count'] -= 1
      with open(refusals, 'w') as f:
        json.dump(rule, f)
    response.status = HTTPStatus.FORBIDDEN
    response.json({'error': {'code': 403, 'message': 'refused by the test (refuse.json)'}})
    return True

  def refusing(handler):
    def handle(request, response, storage, *args, **kwargs):
      if not refused(request, response):
        return handler(request, response, storage, *args, **kwargs)

    return handle

  # objects.get calls `download` by name for ?alt=media; the routing table holds
  # the function itself.
  objects.download = download_with_generation
  server.HANDLERS = tuple(
    (
      regex,
      {m: refusing(download_with_generation if h is download else h) for m, h in handlers.items()},
    )
    for regex, handlers in server.HANDLERS
  )
  emulator = server.create_server('localhost', port, default_bucket=bucket, data_dir=root)
  emulator.run()


if __name__ == '__main__':
  _serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])
