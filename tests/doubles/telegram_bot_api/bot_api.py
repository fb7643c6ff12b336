# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local stand-in for Telegram's Bot API, for tests of Alertmanager's telegram_configs.

    python3 bot_api.py --listen 127.0.0.1 --port 8443 --token TOKEN --record messages.jsonl

Point a receiver's `api_url` at it (http://127.0.0.1:8443, no trailing slash):
Alertmanager then sends `POST {api_url}/bot<token>/sendMessage`. Standard
library only (Python 3.11, Debian 12's python3), one file: it is copied into
test containers and run there with systemd-run.

What Alertmanager 0.25 sends (notify/telegram through gopkg.in/telebot.v3,
Bot.Raw): a POST with `Content-Type: application/json` and a JSON object whose
values are all strings: {"chat_id": "42", "text": "...", "parse_mode": "HTML",
"disable_web_page_preview": "true"}, plus "disable_notification": "true" when
the receiver sets disable_notifications. It creates its client offline and
does not call getMe. Like Telegram, the stand-in also takes the parameters as
a query string, form-encoded or multipart, and answers GET.

Methods (names case-insensitive, as Telegram's):
  sendMessage  checks in Telegram's order and with its answers: the token
               (401 Unauthorized), chat_id (400 "chat_id is empty", or
               "chat not found" unless it is an integer, as a number or a
               string of digits), text (400 "message text is empty", "message
               is too long" over 4096 characters), parse_mode (HTML, Markdown,
               MarkdownV2 or none; with HTML, only Telegram's tags and each
               closed in order, else 400 "can't parse entities"). It answers
               {"ok": true, "result": Message} where the message's text is
               what a client would show (tags removed, entities decoded).
  getMe        the bot, for clients that check their token first.
Anything else is 404 Not Found.

Every sendMessage request that reaches the server is appended to the --record
file as one JSON line, whatever the answer: time (UTC, ISO 8601), ok (whether
it was answered ok), status (the HTTP status), token_ok (whether the token
matched: never the token itself, which the stand-in does not write anywhere
and which no option makes it write), chat_id (an integer when it is one),
text, parse_mode (null when none) and disable_notification. A test counts the
messages delivered with `ok` and checks a refused token with `token_ok`.

It prints one line to stderr when it listens (with the port, so that --port 0
may pick a free one) and one compact line per request, with the method and
never the token; nothing to stdout. SIGTERM stops it cleanly (systemd-run).
"""

import argparse
import datetime
import email.parser
import email.policy
import hmac
import html
import http.server
import json
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse

MAX_BODY = 1 << 20
MAX_TEXT = 4096
PARSE_MODES = ('HTML', 'Markdown', 'MarkdownV2')
# The tags of Telegram's HTML style (core.telegram.org/bots/api#html-style).
HTML_TAGS = frozenset(('b', 'strong', 'i', 'em', 'u', 'ins', 's', 'strike', 'del', 'span', 'tg-spoiler', 'a',
                       'tg-emoji', 'code', 'pre', 'blockquote'))
TAG = re.compile(r'<(/?)([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>')
PATH = re.compile(r'^/bot([^/]*)/([A-Za-z]+)$')
# What the request logs show in place of a token, wherever one could appear.
TOKEN_IN_TEXT = re.compile(r'/bot[^/\s"]*')


class BadRequest(Exception):
    """A request Telegram refuses: status and description of its answer."""

    def __init__(self, status, description):
        super().__init__(description)
        self.status = status
        self.description = description


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='milliseconds').replace('+00:00', 'Z')


def html_to_text(text):
    """The text of a parse_mode=HTML message as Telegram shows it, or BadRequest where Telegram refuses it."""
    parts = []
    open_tags = []
    position = 0
    while True:
        start = text.find('<', position)
        if start < 0:
            parts.append(text[position:])
            break
        parts.append(text[position:start])
        match = TAG.match(text, start)
        offset = len(text[:start].encode('utf-8'))
        if not match or match.group(2).lower() not in HTML_TAGS:
            name = match.group(2) if match else text[start + 1:start + 16].split('>')[0]
            raise BadRequest(400, "Bad Request: can't parse entities: Unsupported start tag \"%s\" at byte offset %d"
                             % (name, offset))
        name = match.group(2).lower()
        if match.group(1):
            if not open_tags or open_tags[-1] != name:
                raise BadRequest(400, "Bad Request: can't parse entities: Unmatched end tag at byte offset %d, "
                                 "expected \"</%s>\", found \"</%s>\"" % (offset, open_tags[-1] if open_tags else '',
                                                                          name))
            open_tags.pop()
        else:
            open_tags.append(name)
        position = match.end()
    if open_tags:
        raise BadRequest(400, "Bad Request: can't parse entities: Can't find end tag corresponding to start tag \"%s\""
                         % open_tags[-1])
    return html.unescape(''.join(parts))


def parse_chat_id(value):
    if value is None or value == '':
        raise BadRequest(400, 'Bad Request: chat_id is empty')
    if isinstance(value, bool):
        raise BadRequest(400, 'Bad Request: chat not found')
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r'-?[0-9]{1,20}', value.strip()):
        return int(value)
    raise BadRequest(400, 'Bad Request: chat not found')


def chat_type(chat_id):
    if chat_id > 0:
        return 'private'
    return 'supergroup' if str(chat_id).startswith('-100') else 'group'


def is_true(value):
    return value is True or (isinstance(value, str) and value.lower() in ('true', '1'))


class BotApi:
    """The bot: its token, its messages, the record. Shared by all request threads."""

    def __init__(self, token, record):
        self.token = token.encode('utf-8')
        self.record = record
        self.lock = threading.Lock()
        self.message_ids = {}
        bot_id = token.split(':', 1)[0]
        self.bot_id = int(bot_id) if bot_id.isdigit() else 1

    def token_ok(self, given):
        return hmac.compare_digest(given.encode('utf-8'), self.token)

    def me(self):
        return {'id': self.bot_id, 'is_bot': True, 'first_name': 'Bot API stand-in', 'username': 'bot_api_stand_in_bot',
                'can_join_groups': True, 'can_read_all_group_messages': False, 'supports_inline_queries': False}

    def send_message(self, token_ok, params):
        """(status, answer, record entry) for a sendMessage request."""
        try:
            recorded_chat = parse_chat_id(params.get('chat_id'))
        except BadRequest:
            recorded_chat = params.get('chat_id')
        entry = {'time': utc_now(), 'ok': False, 'status': 200, 'token_ok': token_ok,
                 'chat_id': recorded_chat, 'text': params.get('text'),
                 'parse_mode': params.get('parse_mode') or None,
                 'disable_notification': is_true(params.get('disable_notification'))}
        try:
            if not token_ok:
                raise BadRequest(401, 'Unauthorized')
            chat_id = parse_chat_id(params.get('chat_id'))
            text = params.get('text')
            if not isinstance(text, str) or not text.strip():
                raise BadRequest(400, 'Bad Request: message text is empty')
            parse_mode = entry['parse_mode']
            if parse_mode is not None and parse_mode not in PARSE_MODES:
                raise BadRequest(400, 'Bad Request: unsupported parse_mode')
            shown = (html_to_text(text) if parse_mode == 'HTML' else text).strip()
            if not shown:
                raise BadRequest(400, 'Bad Request: message text is empty')
            if len(shown) > MAX_TEXT:
                raise BadRequest(400, 'Bad Request: message is too long')
        except BadRequest as refused:
            entry['status'] = refused.status
            return refused.status, error_answer(refused.status, refused.description), entry
        with self.lock:
            message_id = self.message_ids[chat_id] = self.message_ids.get(chat_id, 0) + 1
        chat = {'id': chat_id, 'type': chat_type(chat_id)}
        if chat['type'] == 'private':
            chat['first_name'] = 'Test'
        else:
            chat['title'] = 'Test'
        message = {'message_id': message_id,
                   'from': {'id': self.bot_id, 'is_bot': True, 'first_name': 'Bot API stand-in',
                            'username': 'bot_api_stand_in_bot'},
                   'chat': chat, 'date': int(time.time()), 'text': shown}
        entry['ok'] = True
        return 200, {'ok': True, 'result': message}, entry

    def write_record(self, entry):
        if not self.record:
            return
        line = json.dumps(entry, ensure_ascii=False) + '\n'
        with self.lock:
            with open(self.record, 'a', encoding='utf-8') as handle:
                handle.write(line)
                handle.flush()


def error_answer(status, description):
    return {'ok': False, 'error_code': status, 'description': description}


def form_fields(content_type, body):
    """The fields of a multipart/form-data body, as strings."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b'Content-Type: ' + content_type.encode('latin-1') + b'\r\n\r\n' + body)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param('name', header='content-disposition')
        if name:
            payload = part.get_payload(decode=True) or b''
            fields[name] = payload.decode(part.get_content_charset() or 'utf-8', 'replace')
    return fields


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'bot-api-stand-in'
    sys_version = ''

    def do_GET(self):
        self.handle_call()

    def do_POST(self):
        self.handle_call()

    def handle_call(self):
        api = self.server.api
        url = urllib.parse.urlsplit(self.path)
        match = PATH.match(url.path)
        self.method_name = match.group(2) if match else '-'
        self.log_detail = ''
        try:
            params = self.read_params(url.query)
        except BadRequest as refused:
            self.answer(refused.status, error_answer(refused.status, refused.description))
            return
        if not match:
            self.answer(404, error_answer(404, 'Not Found'))
            return
        token_ok = api.token_ok(urllib.parse.unquote(match.group(1)))
        method = match.group(2).lower()
        if method == 'sendmessage':
            status, answer, entry = api.send_message(token_ok, params)
            api.write_record(entry)
            self.log_detail = ' token_ok=%s chat_id=%s chars=%d' % (
                'yes' if token_ok else 'no', entry['chat_id'], len(str(entry['text'] or '')))
            self.answer(status, answer)
        elif method == 'getme':
            if token_ok:
                self.answer(200, {'ok': True, 'result': api.me()})
            else:
                self.answer(401, error_answer(401, 'Unauthorized'))
        else:
            self.answer(404, error_answer(404, 'Not Found'))

    def read_params(self, query):
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        length = int(self.headers.get('Content-Length') or 0)
        if length > MAX_BODY:
            raise BadRequest(413, 'Request Entity Too Large')
        body = self.rfile.read(length) if length > 0 else b''
        if not body:
            return params
        content_type = self.headers.get('Content-Type') or ''
        kind = content_type.split(';', 1)[0].strip().lower()
        try:
            if kind == 'application/json':
                data = json.loads(body)
                if not isinstance(data, dict):
                    raise ValueError('not an object')
                params.update(data)
            elif kind == 'application/x-www-form-urlencoded':
                params.update(urllib.parse.parse_qsl(body.decode('utf-8'), keep_blank_values=True))
            elif kind == 'multipart/form-data':
                params.update(form_fields(content_type, body))
        except (ValueError, UnicodeDecodeError) as failed:
            raise BadRequest(400, "Bad Request: can't parse request body: %s" % failed) from failed
        return params

    def answer(self, status, document):
        body = json.dumps(document, ensure_ascii=False).encode('utf-8')
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code='-', size='-'):
        sys.stderr.write('%s %s %s %s %s%s\n' % (utc_now(), self.address_string(), self.command,
                                                 getattr(self, 'method_name', '-'), code,
                                                 getattr(self, 'log_detail', '')))

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        text = TOKEN_IN_TEXT.sub('/bot<token>', format % args)
        sys.stderr.write('%s %s %s\n' % (utc_now(), self.address_string(), text))


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def stop(signum, frame):  # pylint: disable=unused-argument
    raise SystemExit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(description="A local stand-in for Telegram's Bot API (sendMessage, getMe).")
    parser.add_argument('--listen', default='127.0.0.1', help='address to listen on (default 127.0.0.1)')
    parser.add_argument('--port', type=int, default=8443, help='port (default 8443; 0 picks a free one)')
    parser.add_argument('--token', required=True, help='the bot token that requests must carry')
    parser.add_argument('--record', help='append each sendMessage request to this file as a JSON line')
    args = parser.parse_args(argv)
    if ':' in args.listen:
        Server.address_family = socket.AF_INET6
    server = Server((args.listen, args.port), Handler)
    server.api = BotApi(args.token, args.record)
    signal.signal(signal.SIGTERM, stop)
    host, port = server.server_address[:2]
    sys.stderr.write('bot_api: listening on http://%s:%d%s\n' % (
        '[%s]' % host if ':' in host else host, port, ', recording to %s' % args.record if args.record else ''))
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
