# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stream a chat completion through the proxy with the official openai client.

Prints one JSON object with what the client saw. With --kill-after N it runs
the command given after `--` once N content chunks have arrived (the test kills
the backend that streams) and reports how the stream ended: the exception the
client raised and the seconds from the kill to it, or a clean end.

    openai_stream.py --base-url URL --key-file F --model M [--ca-file CA]
        [--kill-after N -- COMMAND...]
"""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
import time

import openai


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--base-url', required=True)
    parser.add_argument('--key-file', required=True)
    parser.add_argument('--model', required=True)
    parser.add_argument('--ca-file', help='trust this certificate (default: the system trust store)')
    parser.add_argument('--max-tokens', type=int, default=16)
    parser.add_argument('--kill-after', type=int, default=0, help='run the command after this many chunks')
    parser.add_argument('--timeout', type=float, default=60.0)
    parser.add_argument('command', nargs='*', help='the kill command, after --')
    args = parser.parse_args(argv)

    with open(args.key_file, encoding='utf-8') as handle:
        key = handle.read().strip()
    verify = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else True
    client = openai.OpenAI(base_url=args.base_url, api_key=key, max_retries=0, timeout=args.timeout,
                           http_client=openai.DefaultHttpxClient(verify=verify))

    result = {'chunks': 0, 'content': '', 'finish_reason': None, 'error_type': None, 'error': None,
              'killed': False, 'seconds_kill_to_end': None, 'models': None}
    killed_at = None
    try:
        result['models'] = sorted(model.id for model in client.models.list())
        stream = client.chat.completions.create(
            model=args.model, stream=True, max_tokens=args.max_tokens,
            messages=[{'role': 'user', 'content': 'Count from one to twenty.'}])
        for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.delta.content:
                result['chunks'] += 1
                result['content'] += choice.delta.content
            if choice.finish_reason:
                result['finish_reason'] = choice.finish_reason
            if args.kill_after and killed_at is None and result['chunks'] >= args.kill_after:
                # Timed from the start of the command: an upper bound.
                killed_at = time.monotonic()
                subprocess.run(args.command, check=True, timeout=30)
                result['killed'] = True
    except Exception as exc:  # pylint: disable=broad-except
        # What the client raised, with its class path: the report names it.
        result['error_type'] = '%s.%s' % (type(exc).__module__, type(exc).__qualname__)
        result['error'] = str(exc)
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            result['error_cause'] = '%s.%s: %s' % (type(cause).__module__, type(cause).__qualname__, cause)
    if killed_at is not None:
        result['seconds_kill_to_end'] = round(time.monotonic() - killed_at, 3)
    print(json.dumps(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
