package qemurig

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// xenElfnotePhys32Entry is the ELF note (owner "Xen") that gives a
// kernel's PVH entry point; qemu boots an ELF vmlinux that has it directly.
const xenElfnotePhys32Entry = 18

// ExtractVmlinux writes the uncompressed ELF kernel inside a bzImage to
// out. Booting it (qemu -kernel vmlinux, through the kernel's PVH entry)
// skips the decompressor, which under TCG takes several seconds on an idle
// machine and tens of seconds on a loaded one. The payload is located by
// the boot protocol header and decompressed with xz or zstd (or gzip), and
// the result must be an ELF with the PVH entry note.
func ExtractVmlinux(ctx context.Context, bzImage, out string) error {
	img, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	payload, err := bzPayload(img)
	if err != nil {
		return err
	}
	var data []byte
	switch {
	case bytes.HasPrefix(payload, []byte{0xFD, '7', 'z', 'X', 'Z', 0}):
		// The kernel appends the decompressed size after the stream:
		// --single-stream stops at the stream's end.
		data, err = pipeThrough(ctx, payload, "xz", "-dc", "--single-stream")
	case bytes.HasPrefix(payload, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		data, err = pipeThrough(ctx, payload, "zstd", "-dcq")
	case bytes.HasPrefix(payload, []byte{0x1F, 0x8B}):
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(payload)); err == nil {
			zr.Multistream(false)
			data, err = io.ReadAll(zr)
		}
	default:
		return fmt.Errorf("bzImage payload in an unsupported format (magic % x)", payload[:min(6, len(payload))])
	}
	if err != nil {
		return fmt.Errorf("decompress the kernel: %w", err)
	}
	if err := checkPVH(data); err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

// bzPayload returns the compressed kernel inside a bzImage (boot
// protocol 2.08 or later: payload_offset and payload_length).
func bzPayload(img []byte) ([]byte, error) {
	if len(img) < 0x250 || string(img[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS header)")
	}
	if v := binary.LittleEndian.Uint16(img[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x has no payload fields", v)
	}
	setupSects := int(img[0x1F1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(img[0x248:]))
	end := start + int(binary.LittleEndian.Uint32(img[0x24C:]))
	if start >= end || end > len(img) {
		return nil, errors.New("bzImage payload out of range")
	}
	return img[start:end], nil
}

func pipeThrough(ctx context.Context, in []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, tail(stderr.Bytes()))
	}
	return out, nil
}

// checkPVH verifies that data is an x86-64 ELF kernel with a PVH entry.
func checkPVH(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("decompressed kernel is not an ELF: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("decompressed kernel is for %v", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		for len(notes) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(notes[0:]))
			descsz := int(binary.LittleEndian.Uint32(notes[4:]))
			typ := binary.LittleEndian.Uint32(notes[8:])
			name := notes[12:min(len(notes), 12+namesz)]
			if string(bytes.TrimRight(name, "\x00")) == "Xen" && typ == xenElfnotePhys32Entry {
				return nil
			}
			next := 12 + align4(namesz) + align4(descsz)
			if next > len(notes) {
				break
			}
			notes = notes[next:]
		}
	}
	return errors.New("kernel has no PVH entry note (CONFIG_PVH)")
}

func align4(n int) int { return (n + 3) &^ 3 }
