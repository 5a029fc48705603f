package qemurig

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// KernelMeta is Debian's kernel metapackage; apt resolves it to the
// versioned image package of the day.
const KernelMeta = "linux-image-amd64"

// DefaultModules are the modules the kernel tests need: SocketCAN with
// vcan, the driver of qemu's Kvaser PCIcan card (an SJA1000, a real CAN
// controller with bit timing), and WireGuard. Their dependencies are
// resolved from the package, not listed here.
var DefaultModules = []string{"can", "can_raw", "can_dev", "vcan", "kvaser_pci", "wireguard"}

// Kernel is a Debian kernel image with the modules the guest loads.
type Kernel struct {
	// Package is the versioned image package, such as
	// linux-image-6.1.0-56-amd64, and Version its Debian version.
	Package string `json:"package"`
	Version string `json:"version"`
	// Vmlinuz is the path of the kernel image (a bzImage).
	Vmlinuz string `json:"-"`
	// Vmlinux is the uncompressed ELF kernel qemu boots through its PVH
	// entry, or "" when it could not be extracted (the bzImage is booted).
	Vmlinux string `json:"-"`
	// Wanted are the image modules asked for (the cache entry may hold
	// more: it keeps what earlier users wanted).
	Wanted []string `json:"wanted"`
	// Modules are the modules to insmod, in load order (dependencies
	// first): the image package's and those built from source (Built).
	Modules []string `json:"modules"`
	// Deps maps each image module in Modules to the modules it needs.
	Deps map[string][]string `json:"deps"`
	// Vermagic is the image's modules' vermagic string, which a module
	// built from source must match for the kernel to load it.
	Vermagic string `json:"vermagic"`
	// Built maps each module built from source to its file.
	Built map[string]string `json:"-"`
	// Dir holds vmlinuz and the image's module files.
	Dir string `json:"-"`
}

// ModulePath returns the file of module name.
func (k *Kernel) ModulePath(name string) string {
	if p, ok := k.Built[name]; ok {
		return p
	}
	return filepath.Join(k.Dir, "modules", name+".ko")
}

// KernelOptions configures FetchKernel.
type KernelOptions struct {
	// CacheDir holds one directory per kernel package version.
	CacheDir string
	// Modules are the modules wanted from the image package;
	// DefaultModules when empty.
	Modules []string
	// Source are modules the image does not ship, built from Debian's
	// kernel source for this kernel (BuildSourceModules) and cached in
	// SourceCacheDir. The image modules they depend on are extracted
	// with the others; they load before the image's wanted modules.
	Source         []SourceModule
	SourceCacheDir string
	// Log receives progress lines.
	Log *slog.Logger
}

// FetchKernel returns the current Debian kernel with the wanted modules,
// from the cache when that version was extracted before, or downloaded
// with apt-get download and extracted otherwise. Only the image and the
// needed modules are kept; the package itself is deleted. With Source set
// it also returns the modules built from source for that kernel, checked
// to carry the image's vermagic.
func FetchKernel(ctx context.Context, opts KernelOptions) (*Kernel, error) {
	log := opts.Log
	wanted := opts.Modules
	if len(wanted) == 0 {
		wanted = DefaultModules
	}
	pkg, version, err := resolveKernelPackage(ctx, log)
	if err != nil {
		return nil, err
	}
	var built *BuiltModules
	if len(opts.Source) > 0 {
		built, err = BuildSourceModules(ctx, SourceBuild{
			CacheDir: opts.SourceCacheDir, ImagePackage: pkg, Version: version, Modules: opts.Source, Log: log})
		if err != nil {
			return nil, fmt.Errorf("modules from source: %w", err)
		}
		for _, d := range built.imageDeps() {
			if !slices.Contains(wanted, d) {
				wanted = append(slices.Clip(wanted), d)
			}
		}
	}
	k, err := fetchImage(ctx, opts.CacheDir, pkg, version, wanted, log)
	if err != nil {
		return nil, err
	}
	if built != nil {
		if err := k.addBuilt(built); err != nil {
			return nil, err
		}
	}
	return withVmlinux(ctx, k, log), nil
}

// addBuilt adds the modules built from source to k: checked against the
// image's vermagic, loaded before the image's wanted modules (so qemu's
// CTU CAN FD cores become can0 and can1, ahead of the Kvaser card).
func (k *Kernel) addBuilt(b *BuiltModules) error {
	deps := make(map[string][]string, len(k.Deps)+len(b.Modules))
	for m, d := range k.Deps {
		deps[m] = d
	}
	k.Built = make(map[string]string, len(b.Modules))
	var names []string
	for _, m := range b.Modules {
		if m.Vermagic != k.Vermagic {
			return fmt.Errorf("module %s was built with vermagic %q, the kernel's modules have %q: the kernel would refuse it", m.Name, m.Vermagic, k.Vermagic)
		}
		deps[m.Name] = m.Depends
		k.Built[m.Name] = filepath.Join(b.Dir, m.Name+".ko")
		names = append(names, m.Name)
	}
	order, err := LoadOrder(append(names, k.Modules...), deps, nil)
	if err != nil {
		return err
	}
	k.Modules = order
	return nil
}

// fetchImage returns the image package's kernel and wanted modules from
// the cache, downloading and extracting them on a miss.
func fetchImage(ctx context.Context, cacheDir, pkg, version string, wanted []string, log *slog.Logger) (*Kernel, error) {
	dir := filepath.Join(cacheDir, pkg+"_"+strings.ReplaceAll(version, ":", "%3a"))
	k, err := readCachedKernel(dir, wanted)
	if err == nil {
		log.Info("kernel from cache", "package", pkg, "version", version, "dir", dir)
		return k, nil
	}
	extract := wanted
	if k != nil && k.Deps != nil {
		// Keep what the entry had, so users of other modules share it.
		extract = slices.Clone(wanted)
		for _, m := range k.Wanted {
			if !slices.Contains(extract, m) {
				extract = append(extract, m)
			}
		}
	}
	log.Info("downloading kernel", "package", pkg, "version", version)
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".download-")
	if err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	deb, err := aptDownload(ctx, tmp, pkg+"="+version)
	if err != nil {
		return nil, err
	}
	k, err = extractKernel(ctx, deb, filepath.Join(tmp, "kernel"), extract)
	if err != nil {
		return nil, fmt.Errorf("extract %s: %w", filepath.Base(deb), err)
	}
	k.Package, k.Version = pkg, version
	meta, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "kernel", "kernel.json"), meta, 0o644); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, "kernel"), dir); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	k, err = readCachedKernel(dir, wanted)
	if err != nil {
		return nil, err
	}
	pruneOthers(cacheDir, dir, "linux-image-", log)
	return k, nil
}

// pruneOthers removes the cache entries named prefix* other than keep:
// Debian moves to a new image package now and then, and each kernel entry
// holds a 66 MB vmlinux.
func pruneOthers(cacheDir, keep, prefix string, log *slog.Logger) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(cacheDir, e.Name())
		if p == keep || !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		log.Info("removing an older entry from the cache", "dir", p)
		_ = os.RemoveAll(p)
	}
}

// withVmlinux sets k.Vmlinux, extracting it into the cache entry on first
// use. A kernel without one still boots, slower, from the bzImage.
func withVmlinux(ctx context.Context, k *Kernel, log *slog.Logger) *Kernel {
	path := filepath.Join(k.Dir, "vmlinux")
	if _, err := os.Stat(path); err != nil {
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		defer os.Remove(tmp)
		if err := ExtractVmlinux(ctx, k.Vmlinuz, tmp); err != nil {
			log.Warn("booting the compressed kernel: cannot extract vmlinux", "err", err)
			return k
		}
		if err := os.Rename(tmp, path); err != nil {
			log.Warn("booting the compressed kernel", "err", err)
			return k
		}
	}
	k.Vmlinux = path
	return k
}

// readCachedKernel returns the cache entry in dir when it holds every
// wanted module, with the load order of those alone: the rig's tests and
// fleet-loadgen guest want different modules of one entry.
func readCachedKernel(dir string, wanted []string) (*Kernel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return nil, err
	}
	var k Kernel
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("kernel cache %s: %w", dir, err)
	}
	if k.Vermagic == "" || k.Deps == nil {
		return &k, errors.New("kernel cache written by an older rig (no vermagic or dependencies)")
	}
	order, err := LoadOrder(wanted, k.Deps, nil)
	if err != nil {
		return &k, fmt.Errorf("kernel cache was extracted for other modules: %w", err)
	}
	k.Wanted, k.Modules = wanted, order
	k.Dir = dir
	k.Vmlinuz = filepath.Join(dir, "vmlinuz")
	for _, p := range append([]string{k.Vmlinuz}, mapSlice(k.Modules, k.ModulePath)...) {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kernel cache: %w", err)
		}
	}
	return &k, nil
}

func mapSlice(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}

// resolveKernelPackage asks apt which versioned image the metapackage
// depends on, and that image's candidate version. When apt has no package
// lists yet it runs apt-get update once.
func resolveKernelPackage(ctx context.Context, log *slog.Logger) (pkg, version string, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		pkg, version, err = aptKernelCandidate(ctx)
		if err == nil {
			return pkg, version, nil
		}
		if attempt == 0 {
			log.Info("apt does not know the kernel package yet; running apt-get update", "reason", err)
			if uerr := aptUpdate(ctx); uerr != nil {
				return "", "", fmt.Errorf("resolve %s: %v; %w", KernelMeta, err, uerr)
			}
		}
	}
	return "", "", fmt.Errorf("resolve %s: %w", KernelMeta, err)
}

func aptKernelCandidate(ctx context.Context) (string, string, error) {
	out, err := runOut(ctx, "apt-cache", "show", "--no-all-versions", KernelMeta)
	if err != nil {
		return "", "", err
	}
	return parseKernelMeta(out)
}

// parseKernelMeta reads the versioned image package and its version from
// the metapackage's record: "Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)".
func parseKernelMeta(record string) (string, string, error) {
	for _, line := range strings.Split(record, "\n") {
		deps, ok := strings.CutPrefix(line, "Depends: ")
		if !ok {
			continue
		}
		for _, dep := range strings.Split(deps, ",") {
			name, rest, _ := strings.Cut(strings.TrimSpace(dep), " ")
			if !strings.HasPrefix(name, "linux-image-") {
				continue
			}
			version, ok := strings.CutPrefix(strings.TrimSpace(rest), "(= ")
			version, ok2 := strings.CutSuffix(version, ")")
			if !ok || !ok2 || version == "" {
				return "", "", fmt.Errorf("%s depends on %s without an exact version", KernelMeta, name)
			}
			return name, version, nil
		}
	}
	return "", "", fmt.Errorf("apt-cache show %s names no linux-image package", KernelMeta)
}

func aptUpdate(ctx context.Context) error {
	if _, err := runOut(ctx, "apt-get", "update"); err != nil {
		return err
	}
	return nil
}

// aptDownload downloads one package (name or name=version) into dir and
// returns the .deb's path.
func aptDownload(ctx context.Context, dir, spec string) (string, error) {
	cmd := exec.CommandContext(ctx, "apt-get", "download", spec)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w: %s", spec, err, tail(out))
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s: expected one .deb in %s, found %d", spec, dir, len(debs))
	}
	return debs[0], nil
}

// walkDeb streams the data archive of a .deb (through dpkg-deb, which
// knows every compression Debian uses) and calls fn for each entry.
func walkDeb(ctx context.Context, deb string, fn func(h *tar.Header, r io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	tr := tar.NewReader(bufio.NewReaderSize(out, 1<<20))
	var walkErr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			walkErr = fmt.Errorf("read %s: %w", filepath.Base(deb), err)
			break
		}
		if err := fn(h, tr); err != nil {
			walkErr = err
			break
		}
	}
	if walkErr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return walkErr
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", filepath.Base(deb), err, tail(stderr.Bytes()))
	}
	return nil
}

// extractKernel reads the image package twice: first to learn every
// module's dependencies (and take vmlinuz), then to copy out only the
// modules in the load order of wanted.
func extractKernel(ctx context.Context, deb, dir string, wanted []string) (*Kernel, error) {
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		return nil, err
	}
	deps := make(map[string][]string)
	builtin := make(map[string]bool)
	var compressed []string
	var vermagic string
	haveImage := false
	err := walkDeb(ctx, deb, func(h *tar.Header, r io.Reader) error {
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case h.Typeflag != tar.TypeReg:
		case strings.HasPrefix(name, "boot/vmlinuz-"):
			haveImage = true
			return writeFile(filepath.Join(dir, "vmlinuz"), r)
		case strings.HasPrefix(name, "lib/modules/") && strings.HasSuffix(name, "/modules.builtin"):
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				builtin[ModuleName(strings.TrimSpace(sc.Text()))] = true
			}
			return sc.Err()
		case strings.HasPrefix(name, "lib/modules/") && strings.HasSuffix(name, ".ko"):
			data, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			mi, err := readModInfo(data)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			deps[ModuleName(name)] = mi.Depends
			if vermagic == "" {
				vermagic = mi.Vermagic
			}
		case strings.HasPrefix(name, "lib/modules/") && strings.Contains(name, ".ko."):
			compressed = append(compressed, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !haveImage {
		return nil, errors.New("no boot/vmlinuz-* in the package")
	}
	if len(deps) == 0 && len(compressed) > 0 {
		return nil, fmt.Errorf("the package ships compressed modules (%s); the rig reads only plain .ko files", compressed[0])
	}
	order, err := LoadOrder(wanted, deps, builtin)
	if err != nil {
		return nil, err
	}
	need := make(map[string]bool, len(order))
	orderDeps := make(map[string][]string, len(order))
	for _, m := range order {
		need[m] = true
		orderDeps[m] = deps[m]
	}
	err = walkDeb(ctx, deb, func(h *tar.Header, r io.Reader) error {
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || !strings.HasPrefix(name, "lib/modules/") || !strings.HasSuffix(name, ".ko") {
			return nil
		}
		m := ModuleName(name)
		if !need[m] {
			return nil
		}
		delete(need, m)
		return writeFile(filepath.Join(dir, "modules", m+".ko"), r)
	})
	if err != nil {
		return nil, err
	}
	if len(need) > 0 {
		return nil, fmt.Errorf("modules missing on the second read: %v", need)
	}
	return &Kernel{Wanted: wanted, Modules: order, Deps: orderDeps, Vermagic: vermagic}, nil
}

func writeFile(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func runOut(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(stderr.Bytes()))
	}
	return string(out), nil
}

// tail returns the last few hundred bytes of a command's output, for
// error messages.
func tail(b []byte) string {
	const max = 600
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}
