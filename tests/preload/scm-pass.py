#!/usr/bin/env python3
"""scm-pass.py - pass sockets between processes with SCM_RIGHTS (scm_rights.sh).

  receiver PATH N     take the fds sent over the AF_UNIX socket PATH, say how
                      many came, accept N clients on the first and answer
                      each "served by receiver"
  sender PORT PATH    listen on 127.0.0.1:PORT, pass the listener to PATH,
                      then wait for the receiver to hang up (never accepts)
  conn PORT PATH      connect to 127.0.0.1:PORT, pass the connection to PATH:
                      says "passed" or "refused: ERRNO-NAME"
  client PORT         connect, print the line the server answers
"""
import errno
import socket
import sys


def receiver(path, n):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(path)
    u.listen(1)
    c, _ = u.accept()
    msg, fds, _, _ = socket.recv_fds(c, 16, 16)
    print("receiver: got %d fds" % len(fds), flush=True)
    if not fds:
        return 1
    ls = socket.socket(fileno=fds[0])
    for fd in fds[1:]:
        socket.socket(fileno=fd).close()
    if ls.type != socket.SOCK_STREAM or ls.family != socket.AF_INET:
        print("receiver: not a TCP socket", flush=True)
        return 1
    for _ in range(n):
        a, _ = ls.accept()
        a.sendall(b"served by receiver\n")
        a.close()
    print("receiver: served %d" % n, flush=True)
    c.close()
    return 0


def sender(port, path):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(path)
    socket.send_fds(u, [b"L"], [ls.fileno()])
    print("sender: passed", flush=True)
    u.recv(1)		# the receiver's end: it is done
    return 0


def conn(port, path):
    s = socket.create_connection(("127.0.0.1", port))
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(path)
    try:
        socket.send_fds(u, [b"C"], [s.fileno()])
        print("conn: passed", flush=True)
    except OSError as e:
        print("conn: refused: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
        s.sendall(b"still mine\n")
    s.close()
    u.close()
    return 0


def client(port):
    s = socket.create_connection(("127.0.0.1", port))
    line = s.makefile().readline()
    print(line.strip(), flush=True)
    return 0


def main(argv):
    if argv[1] == "receiver":
        return receiver(argv[2], int(argv[3]))
    if argv[1] == "sender":
        return sender(int(argv[2]), argv[3])
    if argv[1] == "conn":
        return conn(int(argv[2]), argv[3])
    if argv[1] == "client":
        return client(int(argv[2]))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
