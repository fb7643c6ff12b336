# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a machine that follows this UPS does first: log in to upsd over the network.

Speaks NUT's network protocol the way a secondary upsmon does (USERNAME,
PASSWORD, LOGIN, then a variable) and prints JSON: whether the connection was
made, upsd's answers, or the error. The password comes on stdin.

    nut_client.py HOST PORT USER UPS < password
"""

import json
import socket
import sys


def main():
    host, port, user, ups = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    password = sys.stdin.read().strip()
    try:
        connection = socket.create_connection((host, port), timeout=5)
    except OSError as error:
        print(json.dumps({'connected': False, 'error': str(error) or type(error).__name__}))
        return
    answers = []
    with connection, connection.makefile('rw', encoding='ascii', newline='\n') as stream:
        for line in ('USERNAME ' + user, 'PASSWORD ' + password, 'LOGIN ' + ups,
                     'GET VAR %s ups.status' % ups, 'LOGOUT'):
            stream.write(line + '\n')
            stream.flush()
            answers.append(stream.readline().strip())
    print(json.dumps({'connected': True, 'answers': answers}))


if __name__ == '__main__':
    main()
