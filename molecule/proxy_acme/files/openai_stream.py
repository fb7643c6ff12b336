# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stream one chat completion through nginx with the official openai client.

    ACME_API_KEY=... openai_stream.py --base-url https://NAME/v1 --address IP \
        --ca-file ROOT.pem --model MODEL

The client talks to https://NAME as any client would (Host header, SNI and
certificate check against NAME, trusting only --ca-file); only the TCP
connection goes to --address, as curl's --resolve does, because the
controller cannot resolve the test name. Prints one JSON object: the streamed
text, the number of content chunks, the model, and what a wrong key got.
"""

import argparse
import json
import os
import ssl
import sys

import httpx2
import openai


class PinnedAddressTransport(httpx2.HTTPTransport):
    """Connects to a fixed address while keeping the URL's name for TLS."""

    def __init__(self, address, **kwargs):
        super().__init__(**kwargs)
        self.address = address

    def handle_request(self, request):
        name = request.url.host
        request.extensions = dict(request.extensions, sni_hostname=name)
        request.url = request.url.copy_with(host=self.address)
        return super().handle_request(request)


def client(args, api_key):
    """An openai client whose HTTPS trusts only the given CA file."""
    context = ssl.create_default_context(cafile=args.ca_file)
    http = httpx2.Client(transport=PinnedAddressTransport(args.address, verify=context), timeout=30)
    return openai.OpenAI(base_url=args.base_url, api_key=api_key, http_client=http, max_retries=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--base-url', required=True)
    parser.add_argument('--address', required=True)
    parser.add_argument('--ca-file', required=True)
    parser.add_argument('--model', required=True)
    args = parser.parse_args()

    # The test models are random weights: without ignore_eos (vLLM's and
    # llama.cpp's) one may sample its end at the first token.
    stream = client(args, os.environ['ACME_API_KEY']).chat.completions.create(
        model=args.model, stream=True, max_tokens=8, extra_body={'ignore_eos': True},
        messages=[{'role': 'user', 'content': 'Say hello.'}])
    chunks = []
    events = 0
    model = fingerprint = None
    for event in stream:
        model = event.model
        fingerprint = event.system_fingerprint or fingerprint
        for choice in event.choices:
            events += 1
            if choice.delta.content:
                chunks.append(choice.delta.content)

    try:
        client(args, 'sk-not-a-valid-key').models.list()
        wrong_key = 'accepted'
    except openai.AuthenticationError as error:
        wrong_key = error.status_code
    # events: every streamed delta; chunks: those with text (a random model's
    # byte tokens often complete no character, so their deltas are empty).
    json.dump({'text': ''.join(chunks), 'chunks': len(chunks), 'events': events, 'model': model,
               'fingerprint': fingerprint, 'wrong_key_status': wrong_key}, sys.stdout)
    print()


if __name__ == '__main__':
    main()
