"""Plots the train and val loss of a main.log as a PNG, with only the standard library.

    python3 scripts/plot_loss.py LOG_DIR/main.log OUT.png

Train loss ("s:N trl:X") is drawn in blue, val loss ("s:N tel:X") in orange, on linear axes
with the step on x and the loss on y; grid lines are at round values and labelled.
"""
import math
import re
import struct
import sys
import zlib

WIDTH, HEIGHT = 800, 500
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50
BLUE, ORANGE, GREY, BLACK = (31, 119, 180), (255, 127, 14), (225, 225, 225), (0, 0, 0)

# 3x5 pixel digits for axis labels
GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
}


def read_log(path):
    train, val = [], []
    for line in open(path):
        m = re.match(r"s:(\d+) (trl|tel):(\S+)", line)
        if m and math.isfinite(float(m.group(3))):  # a skipped non-finite step logs nan
            (train if m.group(2) == "trl" else val).append((int(m.group(1)), float(m.group(3))))
    return train, val


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.pixels = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.pixels[i:i + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, thick=1):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            x = round(x0 + (x1 - x0) * s / steps)
            y = round(y0 + (y1 - y0) * s / steps)
            for dx in range(thick):
                for dy in range(thick):
                    self.dot(x + dx, y + dy, color)

    def text(self, x, y, s, color=BLACK, scale=2):
        for k, ch in enumerate(s):
            bits = GLYPHS.get(ch, "0" * 15)
            for i, b in enumerate(bits):
                if b == "1":
                    for dx in range(scale):
                        for dy in range(scale):
                            self.dot(x + k * 4 * scale + (i % 3) * scale + dx, y + (i // 3) * scale + dy, color)

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))
        chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data +
                                    struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def nice_ticks(lo, hi, count=5):
    span = hi - lo if hi > lo else 1.0
    raw = span / count
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 10 ** -len(str(int(1 / raw)))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=mag * 10)
    first = (lo // step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_loss.py MAIN_LOG OUT_PNG")
    train, val = read_log(sys.argv[1])
    points = train + val
    if not points:
        sys.exit(f"error: {sys.argv[1]}: no loss lines")
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(max(ys), min(ys) + 1e-3)
    c = Canvas(WIDTH, HEIGHT)
    px = lambda x: round(LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT))
    py = lambda y: round(HEIGHT - BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - TOP - BOTTOM))
    for t in nice_ticks(y0, y1):
        c.line(LEFT, py(t), WIDTH - RIGHT, py(t), GREY)
        c.text(5, py(t) - 5, f"{t:g}")
    for t in nice_ticks(x0, x1):
        c.line(px(t), TOP, px(t), HEIGHT - BOTTOM, GREY)
        c.text(px(t) - 10, HEIGHT - BOTTOM + 10, f"{int(t)}")
    c.line(LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, HEIGHT - BOTTOM, BLACK)
    c.line(LEFT, TOP, LEFT, HEIGHT - BOTTOM, BLACK)
    for series, color in ((train, BLUE), (val, ORANGE)):
        for (a, b), (d, e) in zip(series, series[1:]):
            c.line(px(a), py(b), px(d), py(e), color, thick=2)
        for a, b in series:
            c.line(px(a) - 1, py(b) - 1, px(a) + 1, py(b) + 1, color, thick=2)
    with open(sys.argv[2], "wb") as f:
        f.write(c.png())
    last_val = f", last val loss {val[-1][1]:.4f} at step {val[-1][0]}" if val else ""
    print(f"wrote {sys.argv[2]}: {len(train)} train points (blue), {len(val)} val points (orange){last_val}")


if __name__ == "__main__":
    main()
