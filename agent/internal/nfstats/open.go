// SPDX-License-Identifier: Apache-2.0

package nfstats

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// MaxFileBytes bounds a statistics file. keel-nf writes a few hundred bytes per NF; a file
// past this was not written by keel-nf and is not read.
const MaxFileBytes = 1 << 20

// An instance's statistics files live in a directory its NF containers can write, so the
// agent never trusts the path: an NF could replace its file with a symlink to a file of
// the host, a FIFO that blocks the reader, a device node (an NF container may have
// CAP_MKNOD, and the agent is not bound by its device cgroup: opening a watchdog device
// starts it), or something huge. Both readers below resolve the name with openat2(2) so
// that it can never leave the instance's side, look it up as an O_PATH descriptor (which
// opens nothing), refuse anything but a regular file, only then open it for reading
// through that descriptor, and read at most MaxFileBytes.

// ReadBeneath reads file name of directory dir (the instance's directory on the host,
// bind-mounted into its containers): no symlink is followed and no ".." leaves dir.
func ReadBeneath(dir, name string) ([]byte, time.Time, error) {
	return read(dir, name, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
}

// ReadInRoot reads path as a process whose root directory is root sees it (root is
// /proc/PID/root of a container's process): absolute symlinks and ".." are resolved
// inside root, as the container itself would resolve them, and never reach the host's
// files. This is how the agent reads the files of a Pod's emptyDir, which has no path on
// the host that the agent could know.
func ReadInRoot(root, path string) ([]byte, time.Time, error) {
	return read(root, path, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
}

func read(dir, name string, resolve uint64) ([]byte, time.Time, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer d.Close()
	fd, err := unix.Openat2(int(d.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: resolve,
	})
	if errors.Is(err, unix.ENOSYS) {
		return nil, time.Time{}, fmt.Errorf("%s: this kernel has no openat2 (Linux 5.6+ needed to read NF files safely)", filepath.Join(dir, name))
	}
	if err != nil {
		return nil, time.Time{}, &os.PathError{Op: "openat2", Path: filepath.Join(dir, name), Err: err}
	}
	p := os.NewFile(uintptr(fd), filepath.Join(dir, name))
	defer p.Close()
	st, err := p.Stat()
	if err != nil {
		return nil, time.Time{}, err
	}
	if !st.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("%s: not a regular file (%s)", p.Name(), st.Mode().Type())
	}
	// The file the O_PATH descriptor holds, opened without a second look-up.
	rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, time.Time{}, &os.PathError{Op: "open", Path: p.Name(), Err: err}
	}
	f := os.NewFile(uintptr(rfd), p.Name())
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(b) > MaxFileBytes {
		return nil, time.Time{}, fmt.Errorf("%s: larger than %d bytes", f.Name(), MaxFileBytes)
	}
	return b, st.ModTime(), nil
}
