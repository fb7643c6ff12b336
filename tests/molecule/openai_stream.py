# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stream one chat completion with the official openai client, as a user's program would.

    openai_stream.py --base-url URL --model M [--key-file F] [--ca-file CA]
        [--address IP] [--max-tokens N] [--timeout S] [--list-models] [--wrong-key]
        [--kill-after N -- COMMAND...]

The key is read from --key-file, else from OPENAI_API_KEY (the client's own
variable). HTTPS trusts only --ca-file when given (else the system's store).
--address sends the TCP connection there while the Host header, SNI and the
certificate check keep the URL's name, as curl's --resolve does, for a name
the caller cannot resolve. --list-models lists the models first; --wrong-key
asks for them again with a key that is not one, afterwards. With --kill-after N
the command given after `--` runs once N chunks with text have arrived (a test
kills the backend that streams), and the report says how the stream ended.

Prints one JSON object, exit status 0 whatever the server did:
  text, chunks        the streamed text and the deltas that carried some
  events              every streamed choice (a random model's byte tokens often
                      complete no character, so their deltas are empty)
  model, fingerprint  as the chunks named them (llama-server names its build)
  finish_reason       the last one the stream gave, null when it was cut
  models              the ids /v1/models listed (--list-models), else null
  wrong_key_status    the status a wrong key got (--wrong-key): 401, or 'accepted'
  error_type, error, error_cause
                      what the client raised (class path and message), else null
  killed, seconds_kill_to_end (from the kill command's start), seconds_killed_to_end (from its return)
                      whether the command ran; seconds from it to the stream's end
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import time

import httpx2
import openai

WRONG_KEY = 'sk-not-a-valid-key'


class PinnedAddressTransport(httpx2.HTTPTransport):
    """Connects to a fixed address; the URL's name stays in the Host header (set before), SNI and the certificate."""

    def __init__(self, address, **kwargs):
        super().__init__(**kwargs)
        self.address = address

    def handle_request(self, request):
        request.extensions = dict(request.extensions, sni_hostname=request.url.host)
        request.url = request.url.copy_with(host=self.address)
        return super().handle_request(request)


def client(args, api_key):
    """An openai client that trusts --ca-file (or the system's store) and connects to --address if given."""
    verify = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else True
    if args.address:
        http = openai.DefaultHttpxClient(transport=PinnedAddressTransport(args.address, verify=verify))
    else:
        http = openai.DefaultHttpxClient(verify=verify)
    return openai.OpenAI(base_url=args.base_url, api_key=api_key, max_retries=0, timeout=args.timeout,
                         http_client=http)


def class_path(value):
    return '%s.%s' % (type(value).__module__, type(value).__qualname__)


def wrong_key_status(args):
    try:
        client(args, WRONG_KEY).models.list()
    except openai.APIStatusError as error:
        return error.status_code
    except Exception as error:  # pylint: disable=broad-except
        return class_path(error)
    return 'accepted'


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--base-url', required=True)
    parser.add_argument('--model', required=True)
    parser.add_argument('--key-file', help='the API key (default: $OPENAI_API_KEY)')
    parser.add_argument('--ca-file', help='trust this certificate only (default: the system trust store)')
    parser.add_argument('--address', help='connect here, keeping the URL\'s name for TLS and Host')
    parser.add_argument('--max-tokens', type=int, default=8)
    parser.add_argument('--timeout', type=float, default=60.0)
    parser.add_argument('--list-models', action='store_true', help='list the models before streaming')
    parser.add_argument('--wrong-key', action='store_true', help='then ask with a wrong key; report the status')
    parser.add_argument('--kill-after', type=int, default=0, help='run the command after this many chunks')
    parser.add_argument('command', nargs='*', help='the kill command, after --')
    args = parser.parse_args(argv)
    if args.kill_after and not args.command:
        parser.error('--kill-after needs the command to run, after --')
    return args


def stream(args):
    """The report of one streamed completion (everything but wrong_key_status)."""
    if args.key_file:
        with open(args.key_file, encoding='utf-8') as handle:
            key = handle.read().strip()
    else:
        key = os.environ.get('OPENAI_API_KEY', '')
    result = {'text': '', 'chunks': 0, 'events': 0, 'model': None, 'fingerprint': None, 'finish_reason': None,
              'models': None, 'error_type': None, 'error': None, 'error_cause': None,
              'killed': False, 'seconds_kill_to_end': None}
    killed_at = kill_returned_at = None
    try:
        openai_client = client(args, key)
        if args.list_models:
            result['models'] = sorted(model.id for model in openai_client.models.list())
        # The test models are random weights: without ignore_eos (vLLM's and
        # llama.cpp's) one may sample its end at the first token.
        events = openai_client.chat.completions.create(
            model=args.model, stream=True, max_tokens=args.max_tokens, extra_body={'ignore_eos': True},
            messages=[{'role': 'user', 'content': 'Count from one to twenty.'}])
        for event in events:
            result['model'] = event.model
            result['fingerprint'] = event.system_fingerprint or result['fingerprint']
            for choice in event.choices:
                result['events'] += 1
                if choice.delta.content:
                    result['chunks'] += 1
                    result['text'] += choice.delta.content
                if choice.finish_reason:
                    result['finish_reason'] = choice.finish_reason
            if args.kill_after and killed_at is None and result['chunks'] >= args.kill_after:
                # Timed from the start of the command (an upper bound, which includes the command's own time: a
                # `podman exec` takes seconds on a loaded machine) and from its return (the signal is delivered by
                # then), which is what the proxy's reaction is judged on.
                killed_at = time.monotonic()
                subprocess.run(args.command, check=True, timeout=30)
                kill_returned_at = time.monotonic()
                result['killed'] = True
    except Exception as exc:  # pylint: disable=broad-except
        # What the client raised, with its class path: the report names it.
        result['error_type'] = class_path(exc)
        result['error'] = str(exc)
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            result['error_cause'] = '%s: %s' % (class_path(cause), cause)
    if killed_at is not None:
        ended_at = time.monotonic()
        result['seconds_kill_to_end'] = round(ended_at - killed_at, 3)
        result['seconds_killed_to_end'] = round(ended_at - kill_returned_at, 3)
    return result


def main(argv=None):
    args = parse_args(argv)
    result = stream(args)
    result['wrong_key_status'] = wrong_key_status(args) if args.wrong_key else None
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == '__main__':
    sys.exit(main())
