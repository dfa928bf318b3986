/**
 * Which process holds the server side of a TCP connection, read from Linux's /proc: how a
 * test sees which worker of a host node:cluster handed a connection to, without the
 * broker telling it.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

interface TcpSocket {
  readonly localPort: number;
  readonly remotePort: number;
  readonly inode: number;
}

const ESTABLISHED = '01';

function tcpSockets(): TcpSocket[] {
  const sockets: TcpSocket[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== ESTABLISHED) continue;
      const port = (addr: string | undefined): number => Number.parseInt(addr?.split(':')[1] ?? '', 16);
      sockets.push({ localPort: port(f[1]), remotePort: port(f[2]), inode: Number(f[9]) });
    }
  }
  return sockets;
}

function socketInodes(pid: number | 'self'): Set<number> {
  const inodes = new Set<number>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return inodes; // exited
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(Number(m[1]));
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** The local ports of this process's connections to `serverPort`. */
export function ownPortsTo(serverPort: number): Set<number> {
  const mine = socketInodes('self');
  return new Set(
    tcpSockets()
      .filter((s) => s.remotePort === serverPort && mine.has(s.inode))
      .map((s) => s.localPort),
  );
}

/** Of `pids`, the one holding the server side (`serverPort`) of the connection from `clientPort`. */
export function serverSideOwner(
  serverPort: number,
  clientPort: number,
  pids: readonly number[],
): number | undefined {
  const socket = tcpSockets().find((s) => s.localPort === serverPort && s.remotePort === clientPort);
  if (socket === undefined) return undefined;
  return pids.find((pid) => socketInodes(pid).has(socket.inode));
}

/**
 * Runs `connect`, then names the process of `pids` that holds the connection it made to
 * `serverPort` (exactly one new connection of this process is expected).
 */
export async function connectionOwner<T>(
  serverPort: number,
  pids: readonly number[],
  connect: () => Promise<T>,
): Promise<{ value: T; pid: number | undefined }> {
  const before = ownPortsTo(serverPort);
  const value = await connect();
  const fresh = [...ownPortsTo(serverPort)].filter((p) => !before.has(p));
  if (fresh.length !== 1)
    throw new Error(`expected one new connection to port ${serverPort}, saw ${fresh.length}`);
  return { value, pid: serverSideOwner(serverPort, fresh[0] as number, pids) };
}
