#!/bin/sh
# Prints the Debian version of the work tree, from git describe:
#   v1.2.3 (exactly on the tag)  -> 1.2.3
#   v1.2.3-4-g<sha>              -> 1.2.3+git<date>.<sha>
#   no tag                       -> 0.0.0~git<date>.<sha>
# <date> is the commit date (UTC, YYYYMMDD), so versions sort by history; a
# dirty tree appends .dirty. '~' sorts before anything, so any tagged
# release supersedes an untagged build.
set -eu
d=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d 2>/dev/null || echo 0)
sha=$(git rev-parse --short=8 HEAD 2>/dev/null || echo 0)
dirty=
case $d in *-dirty) dirty=.dirty; d=${d%-dirty} ;; esac
if echo "$d" | grep -Eq '^v?[0-9]+(\.[0-9]+)*$'; then
	echo "${d#v}$dirty"
elif echo "$d" | grep -Eq '^v?[0-9]+(\.[0-9]+)*-[0-9]+-g[0-9a-f]+$'; then
	t=${d%-*-g*}
	echo "${t#v}+git$date.$sha$dirty"
else
	echo "0.0.0~git$date.$sha$dirty"
fi
