// npm runs `prepare` when it packs this package and when it installs it from a directory or a
// git checkout: it compiles src/ into dist/ (the code the package ships). An install from a
// directory does not install the package's own devDependencies, so when the compiler is missing
// they are installed first, as package-lock.json pins them (npm ci, into this directory's
// node_modules).
import { execFileSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");

if (!existsSync(tsc)) {
  // The npm that runs this script (npm_execpath), else the one on PATH. Settings of the outer
  // install that would put the tools elsewhere or leave them out do not apply to this one.
  const npmCli = process.env["npm_execpath"];
  const [command, first] = npmCli && /^npm(-cli)?\.c?js$/.test(basename(npmCli)) ? [process.execPath, [npmCli]] : ["npm", []];
  const env = { ...process.env };
  for (const k of Object.keys(env)) {
    if (/^npm_config_(prefix|global|location|omit|include|production|only|dry_run|install_links|workspaces?|include_workspace_root)$/i.test(k)) delete env[k];
  }
  console.error("advlock: installing the compiler (npm ci --include=dev) to build the package");
  execFileSync(command, [...first, "ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], {
    cwd: here,
    env,
    stdio: "inherit",
  });
}
rmSync(join(here, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", join(here, "tsconfig.json")], { cwd: here, stdio: "inherit" });
