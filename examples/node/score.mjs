// Score image files with an exported detector from Node.js:
//   node score.mjs model.onnx [--category NAME] image.png [...]
//
// The model must come from `python export.py ... graph_preprocess=true`: it takes the decoded
// image (N x H x W x 3 uint8) and does the crop / pad / resize and scaling itself, so this script
// only decodes (turning a JPEG upright by its EXIF orientation, as the Python toolkit reads it).
// onnxruntime-node cannot read ONNX metadata, so the input name, threshold and outputs come from
// the JSON sidecar export.py writes beside the model (model.json). A model calibrated by category
// decides each image at its category's threshold: `--category NAME` names the images' category (one
// its calibration left on the global threshold, for too few genuine images, is decided at that).
// Prints one JSON line per image: {"path", "score", "label", "threshold"} or {"path", "error"}
// (an unreadable file, or one smaller than the sidecar's min_side, as infer.py says).
import { existsSync, readFileSync } from "node:fs";
import { basename, dirname, extname, join } from "node:path";
import { pathToFileURL } from "node:url";
import ort from "onnxruntime-node";
import jpeg from "jpeg-js";
import { PNG } from "pngjs";

// EXIF orientation (tag 0x0112 of the first IFD in a JPEG's APP1 "Exif" segment): 1 upright, 2-8
// the mirrorings and quarter turns that make the stored pixels upright.
function exifOrientation(bytes) {
  let at = 2;
  while (at + 4 <= bytes.length && bytes[at] === 0xff) {
    const marker = bytes[at + 1];
    const length = (bytes[at + 2] << 8) | bytes[at + 3];
    if (marker === 0xda) break; // the image data: no APP1 before it
    if (marker === 0xe1 && bytes.toString("latin1", at + 4, at + 10) === "Exif\0\0") {
      const tiff = at + 10;
      const little = bytes.toString("latin1", tiff, tiff + 2) === "II";
      const u16 = (o) => (little ? bytes.readUInt16LE(o) : bytes.readUInt16BE(o));
      const u32 = (o) => (little ? bytes.readUInt32LE(o) : bytes.readUInt32BE(o));
      const ifd = tiff + u32(tiff + 4);
      for (let entry = 0; entry < u16(ifd); entry++) {
        const field = ifd + 2 + 12 * entry;
        if (u16(field) === 0x0112) return u16(field + 8);
      }
      return 1;
    }
    at += 2 + length;
  }
  return 1;
}

// The pixels of an RGB image stored at `orientation`, made upright.
function upright(rgb, width, height, orientation) {
  if (orientation < 2 || orientation > 8) return { rgb, width, height };
  const turned = orientation >= 5; // 5-8 swap width and height
  const [w, h] = turned ? [height, width] : [width, height];
  const out = new Uint8Array(rgb.length);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      // where the upright pixel (x, y) is stored
      const [sx, sy] = {
        2: [width - 1 - x, y],
        3: [width - 1 - x, height - 1 - y],
        4: [x, height - 1 - y],
        5: [y, x],
        6: [y, height - 1 - x],
        7: [width - 1 - y, height - 1 - x],
        8: [width - 1 - y, x],
      }[orientation];
      out.set(rgb.subarray(3 * (sy * width + sx), 3 * (sy * width + sx) + 3), 3 * (y * w + x));
    }
  }
  return { rgb: out, width: w, height: h };
}

// The bit depths a 16-bit greyscale file may hold (microscopy cameras store 10-, 12- or 14-bit data).
const STORED_DEPTHS = [8, 10, 12, 14, 16];

// A PNG as 8-bit RGBA, as the Python toolkit reads it: a 16-bit image (grey or colour) is scaled
// by the smallest stored depth that holds its brightest value (a 12-bit micrograph is not read
// nearly black) and its alpha to 8 bits; pngjs alone would divide every 16-bit file by 257.
function readPng(bytes) {
  const sixteen = bytes[24] === 16; // IHDR's bit depth, at a fixed offset after the signature
  const png = PNG.sync.read(bytes, { skipRescale: sixteen });
  if (!sixteen) return png;
  let brightest = 0;
  for (let i = 0; i < png.data.length; i++) if (i % 4 !== 3) brightest = Math.max(brightest, png.data[i]);
  const top = 2 ** STORED_DEPTHS.find((bits) => brightest <= 2 ** bits - 1) - 1;
  const data = new Uint8Array(png.data.length);
  for (let i = 0; i < data.length; i++) {
    data[i] = i % 4 === 3 ? Math.round(png.data[i] / 257) : Math.round((png.data[i] / top) * 255);
  }
  return { width: png.width, height: png.height, data };
}

export function decode(path) {
  const bytes = readFileSync(path);
  const lower = path.toLowerCase();
  const rgba = lower.endsWith(".png") ? readPng(bytes)
    : (lower.endsWith(".jpg") || lower.endsWith(".jpeg")) ? jpeg.decode(bytes, { useTArray: true })
    : null;
  if (!rgba) throw new Error("only PNG and JPEG files are decoded by this example");
  const { width, height, data } = rgba;
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0, j = 0; i < data.length; i += 4, j += 3) {
    // Transparent pixels are shown on white, as the Python toolkit reads them.
    const alpha = data[i + 3] / 255;
    for (let c = 0; c < 3; c++) rgb[j + c] = Math.round(data[i + c] * alpha + 255 * (1 - alpha));
  }
  const orientation = lower.endsWith(".png") ? 1 : exifOrientation(bytes);
  const turned = upright(rgb, width, height, orientation);
  return new ort.Tensor("uint8", turned.rgb, [1, turned.height, turned.width, 3]);
}

// The JSON sidecar export.py writes beside the model (model.json for model.onnx); without it, or
// unreadable, one line says what it is and the script exits with status 2.
function readSidecar(modelPath) {
  const sidecar = join(dirname(modelPath), `${basename(modelPath, extname(modelPath))}.json`);
  const fail = (why) => {
    console.error(
      `${modelPath}: ${why}: the JSON sidecar python export.py writes beside every model it exports, which ` +
        "carries what onnxruntime-node cannot read from the model (input name, threshold, min_side); export " +
        "the model with export.py (graph_preprocess=true) and keep the two files together",
    );
    process.exit(2);
  };
  if (!existsSync(modelPath)) {
    console.error(`${modelPath} does not exist`);
    process.exit(2);
  }
  if (!existsSync(sidecar)) fail(`no ${sidecar} beside it`);
  try {
    return JSON.parse(readFileSync(sidecar, "utf8"));
  } catch (error) {
    return fail(`${sidecar} is not JSON (${error.message})`);
  }
}

// A threshold calibrated on scores over tiles (calibrate.py tiles=true, recorded in the sidecar's
// calibration.scoring) was set for scores spread otherwise than those of whole images, which this
// example makes: said on stderr, the scores still printed.
function warnTiledCalibration(modelPath, meta) {
  const scoring = (meta.calibration && meta.calibration.scoring) || {};
  if (!scoring.tiles) return;
  console.error(
    `${modelPath}: its threshold was calibrated on scores over tiles (calibrate.py tiles=true), but this example ` +
      "scores each image whole, whose scores are spread otherwise: the false-positive rate it was set for does not " +
      `carry over. Recalibrate without tiles: python calibrate.py model=${modelPath} input=GENUINE_IMAGES ` +
      "output=OTHER.onnx",
  );
}

// The threshold images of `category` are decided at: the category's own, the global one for a
// category calibration left on it (too few genuine images: the sidecar's
// categories_on_global_threshold, said on stderr) or for no category; a name the model never saw
// (a typo) is refused with the ones it knows.
function categoryThreshold(modelPath, meta, category) {
  const byCategory = meta.category_thresholds || {};
  const onGlobal = meta.categories_on_global_threshold || [];
  if (category === undefined) return meta.threshold;
  if (Object.hasOwn(byCategory, category)) return byCategory[category];
  if (onGlobal.includes(category)) {
    console.error(
      `${modelPath}: category ${JSON.stringify(category)} had too few genuine images for a threshold of its own ` +
        `when the model was calibrated: decided at the global threshold ${meta.threshold}, as infer.py decides it`,
    );
    return meta.threshold;
  }
  const known = Object.keys(byCategory);
  const also = onGlobal.length ? ` (and ${onGlobal.join(", ")}, on the global threshold)` : "";
  console.error(
    known.length || onGlobal.length
      ? `${modelPath} has no threshold for category ${JSON.stringify(category)}: it knows ${known.join(", ")}${also}`
      : `${modelPath} was calibrated with one threshold for every image: leave --category out`,
  );
  process.exit(2);
}

async function main() {
  const args = process.argv.slice(2);
  const [modelPath] = args.splice(0, 1);
  const named = args.indexOf("--category");
  const category = named >= 0 ? args.splice(named, 2)[1] : undefined;
  const images = args;
  if (!modelPath || images.length === 0 || (named >= 0 && !category)) {
    console.error("usage: node score.mjs model.onnx [--category NAME] image.png [image.jpg ...]");
    process.exit(2);
  }
  const meta = readSidecar(modelPath);
  if (meta.input !== "image_u8") {
    console.error(`${modelPath} takes preprocessed tensors; export it with graph_preprocess=true`);
    process.exit(2);
  }
  warnTiledCalibration(modelPath, meta);
  const threshold = categoryThreshold(modelPath, meta, category);
  const session = await ort.InferenceSession.create(modelPath);
  for (const path of images) {
    try {
      const image = decode(path);
      const [height, width] = image.dims.slice(1, 3);
      const smallest = meta.min_side || 1; // as infer.py: an error row, not a Reshape error from onnxruntime
      if (Math.min(height, width) < smallest) {
        const reason = `needs an image of at least ${smallest} px on each side; got ${height} x ${width}`;
        console.log(JSON.stringify({ path, error: `${meta.detector} ${reason}` }));
        continue;
      }
      const result = await session.run({ [meta.input]: image });
      const score = result.score.data[0];
      console.log(JSON.stringify({ path, score, label: score >= threshold ? 1 : 0, threshold }));
    } catch (error) {
      console.log(JSON.stringify({ path, error: String(error.message || error) }));
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main(); // not when imported
